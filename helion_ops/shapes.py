"""Shape sets of the tuner: the targets' products and the model's training grid.

``benchmarks/shapes/validation.csv`` holds the shapes that measure how the model generalizes;
none of their products may be in the training grid or the tuned table (a test checks it).
"""

from __future__ import annotations

# (M, N, K) of the gemm and addmm targets; addmm's are tritonbench's first 8 default shapes
# (its (M, K, N) reordered) and two squares.
GEMM_SHAPES = [
    *[(s, s, s) for s in (256, 512, 1024, 2048, 4096)],
    *[(8192, 8192, k) for k in (1024, 2048, 4096, 8192, 16384)],
    (4096, 1024, 1024),
    (12288, 2048, 2048),
    (1024, 4096, 1024),
    (2048, 12288, 2048),
    (1000000, 512, 512),
    (1000000, 768, 256),
]
ADDMM_SHAPES = [
    (m, 512, 1536) for m in (20120, 34579, 34839, 35561, 35916, 19735, 34533, 35791)
] + [(1024, 1024, 1024), (8192, 8192, 8192)]

# The model's training grid: sizes of no particular model, spread on a log scale from 384 to
# 48k rows and columns and K from 512 to 11k, so that tile counts land anywhere between
# a fraction of a wave and many waves, with tails; eight shapes with sizes whose rows are not
# 16-byte aligned (tensor descriptors fall back to pointers there); sizes that are multiples
# of 8 but not of 64 (rows 16-byte aligned but not 128-byte, as in sizes such as 1000 or 3000
# that users bring), in every dimension or in one; some target shapes; tall products of a
# short K; and the weight gradients of few rows.
TRAINING_SHAPES = [
    (640, 640, 640),
    (896, 1152, 2304),
    (1280, 1280, 5120),
    (1792, 2816, 1280),
    (2304, 2304, 2304),
    (2816, 1792, 7168),
    (3584, 3584, 1536),
    (4608, 2560, 3072),
    (5632, 5632, 2560),
    (6656, 1408, 4608),
    (9728, 3328, 1792),
    (11264, 6400, 3840),
    (1408, 9216, 2816),
    (2560, 20480, 1024),
    (20480, 2560, 2048),
    (24576, 768, 1408),
    (48128, 384, 896),
    (768, 5376, 11264),
    (3328, 9728, 6144),
    (2500, 1700, 1203),
    (1201, 3001, 2047),
    (7001, 999, 1500),
    # Rows of 8 bytes (sizes of 4 mod 8 elements, as 1300 and 2100) and of 4 (2202), whose
    # pointer loads Triton vectorizes that wide: the unaligned factors of those widths.
    (1300, 2100, 1700),
    (3700, 2900, 2300),
    (900, 4500, 3300),
    (2202, 1702, 3102),
    (4100, 1300, 2400),
    (1096, 1096, 1096),
    (1720, 1720, 1720),
    (2600, 2600, 2600),
    (3400, 3400, 3400),
    (4400, 2600, 1400),
    (2200, 4600, 2600),
    (6200, 1800, 1200),
    (1400, 6200, 3800),
    (9800, 3400, 1800),
    (4600, 9800, 2200),
    (24200, 760, 1400),
    (2304, 3400, 2304),
    (3400, 2304, 1400),
    (4608, 4608, 1800),
    (1800, 2816, 4608),
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (4096, 1024, 1024),
    (1024, 4096, 1024),
    (12288, 2048, 2048),
    (8192, 8192, 4096),
    # Tall products of a short K (512-1024) and many tiles, as the projections of a model at
    # many tokens: where a tile's loads and store outweigh its few K steps.
    (24576, 512, 1024),
    (40960, 256, 512),
    (16384, 768, 1024),
    (10240, 1024, 768),
    (8192, 1536, 1024),
    (6144, 2560, 768),
    (14336, 640, 640),
    (20480, 1024, 512),
    (4096, 6144, 768),
    (12288, 1280, 1024),
    # Few rows against a long K, for their a.T @ g: a K of 64-320 rows over large outputs, as
    # the weight gradient of a projection at few tokens. The fit takes only those products'
    # timings: with the other two it moved forward choices, unmeasured, and dropped a split
    # measured faster (NOTES 85).
    (96, 12288, 6144),
    (64, 20480, 8192),
    (160, 8192, 14336),
    (192, 10240, 10240),
    (224, 16384, 5120),
    (320, 6144, 12288),
]

# The batch model's training grid (``helion_ops.model.shipped_batch_model``): forwards of a
# serving batch, 64 to 704 rows against the weights of LLMs (Llama 2 and 3, Qwen2, Gemma,
# Phi-3, Mixtral, Falcon, MoE experts) at batch sizes of no other set. ``tune --training``
# times only their forwards here (``--layout rr``).
BATCH_TRAINING_SHAPES = [
    (64, 12288, 4096),
    (88, 4096, 4096),
    (104, 14336, 4096),
    (120, 28672, 4096),
    (136, 8192, 8192),
    (144, 5120, 13824),
    (160, 18944, 3584),
    (176, 8192, 8192),
    (208, 4096, 11008),
    (232, 3072, 8192),
    (240, 24576, 3072),
    (272, 3584, 3584),
    (300, 4096, 4096),
    (336, 2048, 8192),
    (352, 15360, 5120),
    (400, 1408, 2048),
    (416, 9216, 3072),
    (480, 2048, 5632),
    (544, 4096, 2048),
    (608, 1024, 2048),
    (704, 1536, 8960),
    (72, 10240, 8192),
    (256, 28672, 8192),
    (464, 4544, 18176),
    (640, 5120, 13824),
]
