"""What the kernel sees of its operands: the widest vector their rows load in, whether tensor
descriptors can load them, and where pointer loads' bounds masks vectorize.

Helion bakes an operand's strides into the code it generates, and Triton knows a base address
16-byte aligned or not at all; so these depend on sizes, strides and the base's alignment, all
part of a specialization's key. ``helion_ops.configs`` and the wave model's ``Product`` read
them to price and choose configs.
"""

from __future__ import annotations

import torch

from helion_ops.model import LINE_BYTES, vector_bytes

# The L2's unit of transfer: a row that starts on one reads each run of 128 bytes as four
# whole sectors, however it falls across 128-byte lines.
SECTOR_BYTES = 32


def row_bytes(*tensors: torch.Tensor) -> int:
    """The model's ``row_bytes``: the widest vector (in bytes, at most 16) that every row
    (column, where column-major) of these 2-D tensors starts on, as the kernel sees them:
    Helion bakes the strides into its code, Triton knows a base address 16-byte aligned or
    not at all, and a tensor without a unit stride loads element by element."""
    widths = []
    for t in tensors:
        size = t.element_size()
        if 1 not in t.stride() or t.data_ptr() % 16:
            widths.append(size)
        else:
            widths += [vector_bytes(s * size) for s in t.stride() if s != 1]
    return min(widths, default=16)


def rows_off_lines(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, bool]:
    """The model's ``off_lines`` of ``a @ b``: whether ``a``'s and ``b``'s rows (columns,
    where column-major) start off 128-byte lines, their leading stride in bytes not a
    multiple of ``model.LINE_BYTES``."""
    return _rows_off(a, LINE_BYTES), _rows_off(b, LINE_BYTES)


def rows_off_sectors(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, bool]:
    """Whether ``a``'s and ``b``'s rows (columns, where column-major) start off 32-byte
    sectors, the L2's unit of transfer (their leading stride in bytes not a multiple of
    ``SECTOR_BYTES``): each run of a tile's row then spans one sector more than it fills.
    Rows on sectors but off 128-byte lines (4400, 3600 or 2000 elements of 2 bytes) cost far
    less: their products ran 0.99-1.12x as fast from copies on lines, against 1.2-1.4x for
    rows off sectors (H100, bf16, NOTES 178)."""
    return _rows_off(a, SECTOR_BYTES), _rows_off(b, SECTOR_BYTES)


def host_descriptors_pay(config: dict, *operands: torch.Tensor) -> bool:
    """Whether a config that loads by tensor descriptors builds them on the host (Helion's
    ``host_tensor_descriptors``) rather than in every program: where some operand's rows
    start off 128-byte lines. Triton's device-side descriptors leave the L2 promotion at
    none (``tensormap.replace`` has no field for it, and the 128 bytes start zeroed); the
    descriptors its launcher builds (``cuTensorMapEncodeTiled``) promote to 128-byte lines,
    so that a row's run of 128 bytes that straddles two lines is fetched as whole lines.
    Measured (NOTES 139, H100, six products of no set, under graphs): 1.02-1.11x faster on
    five, 0.99x on one (geomean 1.05x); a part of what rows off lines cost (15-37%, NOTES
    90). Launch plans and the C++ path encode each call's descriptors (``plans``,
    ``native``), so the host pays no more than for device-built ones."""
    indexing = config.get("indexing")
    loads_by_descriptor = "tensor_descriptor" in (
        [indexing] if isinstance(indexing, str) else indexing or []
    )
    return loads_by_descriptor and any(_rows_off(t, LINE_BYTES) for t in operands)


def pointer_tiles_on_host_descriptors(config: dict, *operands: torch.Tensor) -> bool:
    """Whether a plain product's or a backward pair's pointer config loads its tiles by
    tensor descriptors built on the host instead: its operands (two, or a pair's four) can
    be loaded so (``tma_aligned``) and some rows start off 128-byte lines, or the pointer
    loads' masks would not vectorize (``pointer_tiles_unmasked``). The model chooses
    pointer tiles for sub-wave products (1000^3: 64x128), and ``configs.pair_rule`` for small
    pairs (1000^3's backward: 128x128), as device-built descriptors cost each program more
    than they save (NOTES 80: host-built ones 0-12% faster there, on lines); off lines the
    pointer tiles cost more than descriptors (NOTES 90: 2200^3 71.4 us against 63.1).
    Measured on forwards (NOTES 139, six products of no set around 1000-1400, under graphs):
    1.16-1.24x faster than the pointer tiles on five (H100), 0.96x on 1000x1000x2000;
    host-built 1.17-1.26x faster than device-built descriptors on all six (H200). The
    backward pairs (NOTES 143, seven backwards of no set of sizes 520-2000, H100): 1.03-1.21x
    faster, geomean 1.14x; 1000^3's backward 1.08-1.17x in the validation set."""
    return (
        len(operands) in (2, 4)
        and _pointer_tiles_fit_descriptors(config, *operands)
        and (any(_rows_off(t, LINE_BYTES) for t in operands) or pointer_tiles_unmasked(*operands))
    )


def model_tiles_on_host_descriptors(config: dict, a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the wave model's pointer tiles for a plain ``a @ b`` (its generic or batch
    choice, no bias; not the table's entries, nor streaming, narrow or transposed products)
    load by tensor descriptors built on the host, on rows on 128-byte lines as off them
    (``pointer_tiles_on_host_descriptors`` moves those off lines): where ``a`` and ``b`` can
    be loaded so (``tma_aligned``). The model was fit on descriptors built in every program,
    which cost sub-wave products more than pointer tiles; built on the host the same tiles
    at the same depth ran 1.02-1.28x the pointer tiles' speed on the H200 (NOTES 80: 1024^3
    'rc' 64x128x64 6.9 -> 5.4 us, 1664^3 21.7 -> 20.2), and launch plans now build them per
    call in C++ (NOTES 139). Measured (NOTES 143, seven products of no set, H100, under
    graphs): 0.99-1.07x, geomean 1.03x; the validation set's times unmoved."""
    return _pointer_tiles_fit_descriptors(config, a, b)


def _pointer_tiles_fit_descriptors(config: dict, *operands: torch.Tensor) -> bool:
    """Whether ``config`` loads pointer tiles (not split over K) from operands that tensor
    descriptors can load (``tma_aligned``): what both rules above move."""
    pointer = config.get("indexing") == "pointer" and "split_k" not in config
    return pointer and tma_aligned(*operands)


def _rows_off(t: torch.Tensor, unit: int) -> bool:
    """Whether a 2-D tensor's rows (columns, where column-major) start off ``unit``-byte
    boundaries (``LINE_BYTES`` or ``SECTOR_BYTES``)."""
    return t.dim() == 2 and max(t.stride()) * t.element_size() % unit != 0


def k_masks_vectorize(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the K loops of the split kernels (split-K, the last wave's tail) load ``a``
    and ``b`` in vectors. Their loop ends where a piece of K does, so Helion masks every
    load by K and loads by pointer; where K is not a multiple of 16 bytes and an operand is
    contiguous along K, the mask differs from element to element and each is loaded alone
    (no vector loads, no asynchronous copies). On the H200 (bf16) the GPT-2 head's
    ``grad_out @ mat2.T`` (4096x768, K = 50257, staged) took 2.4-3.7 ms split-K and 1.5-2.0
    with its last wave split, against 0.61 ms on the plain kernel with tensor descriptors."""
    size = a.element_size()
    return all(length * size % 16 == 0 for dim, length in _contiguous_sizes(a, b) if dim == "k")


def masks_vectorize(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the plain kernel's pointer loads of ``a`` and ``b`` vectorize: along each
    operand's contiguous dimension the size is a whole number of 16 bytes. Else the bounds
    mask of the last tile along it differs from element to element, and every load is of one
    element: the model's fit (on sizes of whole 16 bytes) does not hold for pointer candidates
    there, so for aligned operands it chooses among tensor descriptors
    (``Model.best_plain``'s ``tma_only``), which need no mask. (Unaligned operands' factors
    were measured on every candidate as it runs on them, masks included.) On the H200 (bf16)
    the GPT-2 head's forward, staged (N = 50257 along b's rows), took 2.15 ms on a pointer
    candidate and 0.68 on tensor descriptors."""
    size = a.element_size()
    return all(length * size % 16 == 0 for _, length in _contiguous_sizes(a, b))


def tensor_descriptors_only(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the model chooses for ``a @ b`` among tensor-descriptor candidates only: where
    pointer loads' masks do not vectorize (``masks_vectorize``) on rows that start on 16
    bytes (``row_bytes``). Rows off 16 bytes choose among every candidate: their factors were
    measured on each candidate as it runs on them, pointers and masks included, and such rows
    favour pointer tiles (H200, bf16: rows of 8 bytes, call 299, 1100^3 on 128x128x64 pointer
    tiles 13-16 us, on 128x256x64 tensor-descriptor ones, loading by pointer there, 20-21,
    NOTES 129; rows of 2 bytes, calls 310-311, six unstaged products 1.35-5.9x faster, NOTES
    131)."""
    return not masks_vectorize(a, b) and row_bytes(a, b) == 16


# The least N and K of a product that ``pointer_tiles_unmasked`` moves. Below it the model's
# choice among every tile lost (H200, bf16, under CUDA graphs, call 455): 65536x1x256's forward
# 7.6 us against 6.9 on tensor-descriptor candidates, 2048x1x4096's backward (its grad_out @
# w.T has a K of 1) 12.5 against 11.2.
UNMASKED_MIN_SIDE = 9


def pointer_tiles_unmasked(*operands: torch.Tensor) -> bool:
    """Whether pointer tiles for a product's fp16 or bf16 operands (or a pair's four)
    load by tensor descriptors built on the host, which need no bounds masks, where pointer
    loads' masks would not vectorize (``masks_vectorize``) on rows that start on 16 bytes
    (``tma_aligned``), in products of at least ``UNMASKED_MIN_SIDE`` columns and K. The wave
    model then chooses among every candidate's tiles, not the tensor-descriptor candidates'
    alone (``tensor_descriptors_only``), all 128 columns or wider: its fit of a pointer tile
    stands for the same tile on host-built descriptors (0.99-1.07x as fast where masks
    vectorize, NOTES 143). So 3000x100x2048's weight gradient (2048x100x3000, N = 100) runs
    on 128 programs of 64x32, not 16 of 128x128 (NOTES 183 (d)).

    Measured on and off (H200, bf16, under CUDA graphs, calls 452 and 455, NOTES 184),
    products of no set: backwards 2048x100x3000 52.0 -> 25.2 us (aten 32.0), 3000x100x2048
    67.2 -> 28.3 (29.4), 2048x250x2048 29.5 -> 21.3 (31.4), 12000x500x2000 1.05x; the
    forward 3000x250x5000 40.8 -> 27.1 (44.9); three more 0.99-1.01x. Of the shape sets'
    products it moves an LM head's backward, 1024x50257x1024, 1.11x and 3500^3's 0.99x. With
    a bias epilogue too (H100, call 458, NOTES 187): addmm forwards 1500x500x5000 45.8 -> 30.4
    us (aten 46.9), 3000x250x5000 47.3 -> 31.0 (48.0), 12000x500x2000 1.006x."""
    pairs = list(zip(operands[::2], operands[1::2], strict=True))
    return (
        unmasked_sizes(*operands)
        and tma_aligned(*operands)
        and not all(masks_vectorize(a, b) for a, b in pairs)
    )


def unmasked_sizes(*operands: torch.Tensor) -> bool:
    """Whether products' operands (``a, b`` or a pair's four) are of the dtypes and sizes
    that ``pointer_tiles_unmasked`` moves onto host-built descriptors: fp16 or bf16, and each
    product's N and K at least ``UNMASKED_MIN_SIDE``."""
    pairs = zip(operands[::2], operands[1::2], strict=True)
    return operands[0].element_size() == 2 and all(
        min(a.shape[1], b.shape[1]) >= UNMASKED_MIN_SIDE for a, b in pairs
    )


def _contiguous_sizes(a: torch.Tensor, b: torch.Tensor) -> list[tuple[str, int]]:
    """(name, size) of each dimension ("m", "k" or "n") along which an operand of ``a @ b``
    is contiguous (unit stride), once per such operand: where a pointer load's bounds mask
    runs element by element unless the size is a whole number of 16 bytes."""
    m, k = a.shape
    n = b.shape[1]
    dims = ((a, (("m", m), ("k", k))), (b, (("k", k), ("n", n))))
    return [
        dim
        for t, sizes in dims
        for dim, stride in zip(sizes, t.stride(), strict=True)
        if stride == 1
    ]


def tma_aligned(*tensors: torch.Tensor) -> bool:
    """Whether tensor descriptors can load these 2-D tensors: one unit stride, the other
    stride and the base 16-byte aligned (else Helion falls back to pointer indexing): rows
    (columns, where column-major) that start on 16 bytes (``row_bytes``)."""
    return row_bytes(*tensors) == 16
