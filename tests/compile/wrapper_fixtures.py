"""Two inductor wrapper modules for DLRM's interaction, as text: the GPU form and the CPU form.

Both are cut down to what the concatenation analysis reads (buffer lines, launches, library calls, the kernels
of the gathers and of the concatenations), in the format inductor writes. ``B = 8``, ``F = 26``, ``D = 16``.

- :data:`GPU_WRAPPER`: torch 2.11 on an H100 (notebook 03's committed GPU run): the second ``cat`` is one
  pointwise kernel (``…_30``) that recomputes ReLU(mm + bias) for the dense slot and loads the gathers'
  ``[B, 416]`` buffer for the rest; the interaction's output ``[B, 367]`` is another (``…_31``) that
  recomputes the same ReLU. Kernel ``…_30`` and the gather are the committed kernels, shortened and at
  ``B = 8``; ``…_31`` is written in the same form.
- :data:`CPU_WRAPPER`: torch 2.13 with Triton on the CPU: the ReLU computed once and stored twice (``…_29``),
  then a plain copy of the ``[B, 416]`` buffer into columns 16–431 (``…_30``).
"""

# ruff: noqa: E501  (kernel signatures and wrapper lines are kept on one line, as inductor writes them)
from __future__ import annotations

_HEADER = "# AOT ID: ['0_inference']\nfrom torch._inductor.async_compile import AsyncCompile\n"


def _kernel(name: str, aten: str, source: str, device: str) -> str:
    return (
        f"\n# Original ATen: [{aten}]\n{name} = async_compile.triton('{name}', '''\n"
        f"import triton\nimport triton.language as tl\n\n@triton.jit\n{source.strip()}\n"
        f"''', device_str='{device}')\n"
    )


_GATHER = """
def triton_poi_fused_embedding_4(in_ptr0, in_ptr1, out_ptr0, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
    ynumel = 8
    xnumel = 16
    yoffset = tl.program_id(1) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < xnumel
    y0 = yindex
    x1 = xindex
    tmp0 = tl.load(in_ptr0 + (y0), None, eviction_policy='evict_last')
    tl.device_assert((0 <= tmp0) & (tmp0 < 1461), "index out of bounds: 0 <= tmp0 < 1461")
    tmp6 = tl.load(in_ptr1 + (x1 + 16*tmp0), xmask)
    tl.store(out_ptr0 + (x1 + 416*y0), tmp6, xmask)
"""

_GPU_CAT_30 = """
def triton_poi_fused_addmm_cat_relu_stack_unsqueeze_30(in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 3456
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    x1 = ((xindex // 16) % 27)
    x0 = (xindex % 16)
    x2 = xindex // 432
    x3 = xindex
    tmp0 = x1
    tmp3 = tl.full([1], 1, tl.int64)
    tmp4 = tmp0 < tmp3
    tmp5 = tl.load(in_ptr0 + (x0), tmp4, eviction_policy='evict_last', other=0.0)
    tmp6 = tl.load(in_ptr1 + (x0 + 16*x2), tmp4, eviction_policy='evict_last', other=0.0)
    tmp7 = tmp5 + tmp6
    tmp8 = tl.full([1], 0, tl.int32)
    tmp9 = triton_helpers.maximum(tmp8, tmp7)
    tmp12 = tmp0 >= tmp3
    tmp15 = tl.load(in_ptr2 + (x0 + 16*((-1) + x1) + 416*x2), tmp12, other=0.0)
    tmp16 = tl.where(tmp4, tmp9, tmp15)
    tl.store(out_ptr0 + (x3), tmp16, None)
"""

_GPU_CAT_31 = """
def triton_poi_fused_addmm_cat_index_select_relu_view_31(in_ptr0, in_ptr1, in_ptr2, in_ptr3, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 2936
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = (xindex % 367)
    x1 = xindex // 367
    x2 = xindex
    tmp3 = tl.full([1], 16, tl.int64)
    tmp4 = x0 < tmp3
    tmp5 = tl.load(in_ptr0 + (x0), tmp4 & xmask, eviction_policy='evict_last', other=0.0)
    tmp6 = tl.load(in_ptr1 + (16*x1 + (x0)), tmp4 & xmask, eviction_policy='evict_last', other=0.0)
    tmp7 = tmp5 + tmp6
    tmp8 = tl.full([1], 0, tl.int32)
    tmp9 = triton_helpers.maximum(tmp8, tmp7)
    tmp15 = tl.load(in_ptr2 + ((-16) + x0), (~tmp4) & xmask, eviction_policy='evict_last', other=0.0)
    tmp20 = tl.load(in_ptr3 + (tmp15 + 729*x1), (~tmp4) & xmask, other=0.0)
    tmp22 = tl.where(tmp4, tmp9, tmp20)
    tl.store(out_ptr0 + (x2), tmp22, xmask)
"""

_CPU_CAT_29 = """
def triton_poi_fused_cat_relu_stack_unsqueeze_29(in_ptr0, out_ptr0, out_ptr1, xnumel, XBLOCK : tl.constexpr):
    xnumel = 128
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x2 = xindex
    x0 = (xindex % 16)
    x1 = xindex // 16
    tmp0 = tl.load(in_ptr0 + (x2), xmask)
    tmp1 = tl.full([1], 0, tl.int32)
    tmp2 = triton_helpers.maximum(tmp1, tmp0)
    tl.store(out_ptr0 + (x0 + 432*x1), tmp2, xmask)
    tl.store(out_ptr1 + (x0 + 367*x1), tmp2, xmask)
"""

_CPU_CAT_30 = """
def triton_poi_fused_cat_relu_stack_unsqueeze_30(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 3328
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x2 = xindex
    x0 = (xindex % 416)
    x1 = xindex // 416
    tmp0 = tl.load(in_ptr0 + (x2), xmask)
    tl.store(out_ptr0 + (x0 + 432*x1), tmp0, xmask)
"""

_CPU_INDEX_31 = """
def triton_poi_fused_index_select_view_31(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 2808
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = (xindex % 351)
    x1 = xindex // 351
    tmp0 = tl.load(in_ptr0 + (x0), xmask, eviction_policy='evict_last')
    tmp7 = tl.load(in_ptr1 + (tmp0 + 729*x1), xmask)
    tl.store(out_ptr0 + (x0 + 367*x1), tmp7, xmask)
"""


def _gathers(device: str) -> str:
    lines = [f"        buf33 = empty_strided_{device}((8, 416), (416, 1), torch.float32)"]
    for f in range(26):
        lines += [
            f"        buf{100 + f} = reinterpret_tensor(buf33, (8, 16), (416, 1), {16 * f})  # alias",
            f"        triton_poi_fused_embedding_4.run(buf6, arg{11 + f}_1, buf{100 + f}, 8, 16, stream=stream0)",
        ]
    return "\n".join(lines)


GPU_WRAPPER = (
    _HEADER
    + _kernel("triton_poi_fused_embedding_4", "aten.select, aten.embedding", _GATHER, "cuda")
    + _kernel(
        "triton_poi_fused_addmm_cat_relu_stack_unsqueeze_30",
        "aten.addmm, aten.relu, aten.cat",
        _GPU_CAT_30,
        "cuda",
    )
    + _kernel(
        "triton_poi_fused_addmm_cat_index_select_relu_view_31", "aten.addmm, aten.cat", _GPU_CAT_31, "cuda"
    )
    + f"""
    def call(self, args):
        assert_size_stride(arg6_1, (16, ), (1, ))
        assert_size_stride(arg37_1, (351, ), (1, ))
        buf4 = empty_strided_cuda((8, 16), (16, 1), torch.float32)
        extern_kernels.mm(buf3, reinterpret_tensor(arg5_1, (256, 16), (1, 256), 0), out=buf4)
        buf6 = empty_strided_cuda((26, 8), (8, 1), torch.int64)
{_gathers("cuda")}
        buf36 = empty_strided_cuda((8, 27, 16), (432, 16, 1), torch.float32)
        stream0 = get_raw_stream(0)
        triton_poi_fused_addmm_cat_relu_stack_unsqueeze_30.run(arg6_1, buf4, buf33, buf36, 3456, stream=stream0)
        buf37 = empty_strided_cuda((8, 27, 27), (729, 27, 1), torch.float32)
        extern_kernels.bmm(buf36, reinterpret_tensor(buf36, (8, 16, 27), (432, 1, 16), 0), out=buf37)
        buf40 = empty_strided_cuda((8, 367), (367, 1), torch.float32)
        triton_poi_fused_addmm_cat_index_select_relu_view_31.run(arg6_1, buf4, arg37_1, buf37, buf40, 2936, stream=stream0)
        return (buf40, )
"""
)

CPU_WRAPPER = (
    _HEADER
    + _kernel("triton_poi_fused_embedding_4", "aten.select, aten.embedding", _GATHER, "cpu")
    + _kernel("triton_poi_fused_cat_relu_stack_unsqueeze_29", "aten.relu, aten.cat", _CPU_CAT_29, "cpu")
    + _kernel("triton_poi_fused_cat_relu_stack_unsqueeze_30", "aten.relu, aten.cat", _CPU_CAT_30, "cpu")
    + _kernel("triton_poi_fused_index_select_view_31", "aten.view, aten.index_select", _CPU_INDEX_31, "cpu")
    + f"""
    def call(self, args):
        buf4 = empty_strided_cpu((8, 16), (16, 1), torch.float32)
        extern_kernels.addmm(arg6_1, buf3, reinterpret_tensor(arg5_1, (32, 16), (1, 32), 0), alpha=1, beta=1, out=buf4)
        buf5 = empty_strided_cpu((208, ), (1, ), torch.int64)
        buf6 = reinterpret_tensor(buf5, (26, 8), (8, 1), 0); del buf5  # reuse
{_gathers("cpu")}
        buf36 = empty_strided_cpu((8, 27, 16), (432, 16, 1), torch.float32)
        buf34 = reinterpret_tensor(buf36, (8, 1, 16), (432, 16, 1), 0)  # alias
        buf40 = empty_strided_cpu((8, 367), (367, 1), torch.float32)
        buf38 = reinterpret_tensor(buf40, (8, 16), (367, 1), 0)  # alias
        triton_poi_fused_cat_relu_stack_unsqueeze_29.run(buf4, buf34, buf38, 128, stream=raw_streamNone)
        buf35 = reinterpret_tensor(buf36, (8, 26, 16), (432, 16, 1), 16)  # alias
        triton_poi_fused_cat_relu_stack_unsqueeze_30.run(buf33, buf35, 3328, stream=raw_streamNone)
        buf37 = empty_strided_cpu((8, 27, 27), (729, 27, 1), torch.float32)
        extern_kernels.bmm(buf36, reinterpret_tensor(buf36, (8, 16, 27), (432, 1, 16), 0), out=buf37)
        assert_size_stride(arg37_1, (351, ), (1, ), 'input')
        buf39 = reinterpret_tensor(buf40, (8, 351), (367, 1), 16)  # alias
        triton_poi_fused_index_select_view_31.run(arg37_1, buf37, buf39, 2808, stream=raw_streamNone)
        buf41 = empty_strided_cpu((8, 128), (128, 1), torch.float32)
        extern_kernels.addmm(arg39_1, buf40, reinterpret_tensor(arg38_1, (367, 128), (1, 367), 0), alpha=1, beta=1, out=buf41)
        return (buf41, )
"""
)
