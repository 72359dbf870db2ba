package runner

import (
	"fmt"

	"stepbench/kernels/ref"
)

var _ FP8Backend = (*CPU)(nil)

// EnableFP8 needs nothing on the cpu backend: kernels/ref runs FP8 too.
func (*CPU) EnableFP8() error { return nil }

// UploadFP8 copies E4M3 bytes into dst at offset.
func (*CPU) UploadFP8(dst Buffer, offset int, src []uint8) error {
	cb, err := asCPU(dst, F8E4M3, "upload fp8")
	if err != nil {
		return err
	}
	if offset < 0 || offset+len(src) > len(cb.u8) {
		return fmt.Errorf("upload fp8: %d elements at %d overflow a buffer of %d", len(src), offset, len(cb.u8))
	}
	copy(cb.u8[offset:], src)
	return nil
}

// DownloadFP8 copies the first len(dst) bytes of src.
func (*CPU) DownloadFP8(src Buffer, dst []uint8) error {
	cb, err := asCPU(src, F8E4M3, "download fp8")
	if err != nil {
		return err
	}
	if len(dst) > len(cb.u8) {
		return fmt.Errorf("download fp8: %d elements from %d", len(dst), len(cb.u8))
	}
	copy(dst, cb.u8)
	return nil
}

// DownloadF32 copies the first len(dst) elements of src.
func (*CPU) DownloadF32(src Buffer, dst []float32) error {
	cb, err := asCPU(src, F32, "download f32")
	if err != nil {
		return err
	}
	if len(dst) > len(cb.f32) {
		return fmt.Errorf("download f32: %d elements from %d", len(dst), len(cb.f32))
	}
	copy(dst, cb.f32)
	return nil
}

// QuantizeFP8 is ref.QuantizeFP8 (static), ref.QuantizeFP8Tensor or
// ref.QuantizeFP8Token.
func (*CPU) QuantizeFP8(out, scale, x Buffer, rows, cols int, mode ActQuant) error {
	if rows < 0 || cols < 0 {
		return fmt.Errorf("quantize fp8: rows %d cols %d", rows, cols)
	}
	n := rows * cols
	ob, err := asCPU(out, F8E4M3, "quantize fp8 out")
	if err != nil {
		return err
	}
	sb, err := asCPU(scale, F32, "quantize fp8 scale")
	if err != nil {
		return err
	}
	xs, err := bf16s("quantize fp8", []Buffer{x}, []int{n}, 0)
	if err != nil {
		return err
	}
	needScales := 1
	if mode == QuantDynamicToken {
		needScales = rows
	}
	if len(ob.u8) < n || len(sb.f32) < needScales {
		return fmt.Errorf("quantize fp8: out holds %d of %d elements, scale %d of %d", len(ob.u8), n, len(sb.f32), needScales)
	}
	switch mode {
	case QuantStatic:
		ref.QuantizeFP8(ob.u8[:n], xs[0], sb.f32[0])
	case QuantDynamicTensor:
		sb.f32[0] = ref.QuantizeFP8Tensor(ob.u8[:n], xs[0])
	case QuantDynamicToken:
		ref.QuantizeFP8Token(ob.u8[:n], sb.f32, xs[0], rows, cols)
	default:
		return fmt.Errorf("quantize fp8: unknown mode %d", mode)
	}
	return nil
}

// LinearFP8 is ref.LinearFP8.
func (*CPU) LinearFP8(out, x, xScale, w, wScale Buffer, m, n, k int, xPerRow, wPerRow bool) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("linear fp8: m=%d n=%d k=%d", m, n, k)
	}
	ob, err := bf16s("linear fp8", []Buffer{out}, []int{m * n}, 1)
	if err != nil {
		return err
	}
	xb, err := asCPU(x, F8E4M3, "linear fp8 x")
	if err != nil {
		return err
	}
	wb, err := asCPU(w, F8E4M3, "linear fp8 w")
	if err != nil {
		return err
	}
	xs, err := asCPU(xScale, F32, "linear fp8 x scale")
	if err != nil {
		return err
	}
	ws, err := asCPU(wScale, F32, "linear fp8 w scale")
	if err != nil {
		return err
	}
	xStride, wStride, needX, needW := 0, 0, 1, 1
	if xPerRow {
		xStride, needX = 1, m
	}
	if wPerRow {
		wStride, needW = 1, n
	}
	if len(xb.u8) < m*k || len(wb.u8) < n*k || len(xs.f32) < needX || len(ws.f32) < needW {
		return fmt.Errorf("linear fp8: x %d/%d, w %d/%d, x scales %d/%d, w scales %d/%d elements",
			len(xb.u8), m*k, len(wb.u8), n*k, len(xs.f32), needX, len(ws.f32), needW)
	}
	ref.LinearFP8(ob[0], xb.u8[:m*k], xs.f32, xStride, wb.u8[:n*k], ws.f32, wStride, m, n, k)
	return nil
}
