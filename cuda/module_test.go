package cuda

import (
	"math"
	"testing"
	"unsafe"
)

func TestPackLaunchArgs(t *testing.T) {
	args := []any{DevPtr(0x7f0000001000), int32(-5), uint32(7), int64(-1 << 40), uint64(1 << 63), float32(1.5)}
	packed, err := packLaunchArgs(args)
	if err != nil {
		t.Fatalf("packLaunchArgs: %v", err)
	}
	defer packed.free()
	params := unsafe.Slice(packed.params, len(args))
	for i, p := range params {
		if uintptr(p)%8 != 0 {
			t.Errorf("arg %d slot %p not 8-byte aligned", i, p)
		}
	}
	if got := *(*uint64)(params[0]); got != 0x7f0000001000 {
		t.Errorf("DevPtr = %#x", got)
	}
	if got := *(*int32)(params[1]); got != -5 {
		t.Errorf("int32 = %d", got)
	}
	if got := *(*uint32)(params[2]); got != 7 {
		t.Errorf("uint32 = %d", got)
	}
	if got := *(*int64)(params[3]); got != -1<<40 {
		t.Errorf("int64 = %d", got)
	}
	if got := *(*uint64)(params[4]); got != 1<<63 {
		t.Errorf("uint64 = %d", got)
	}
	if got := *(*float32)(params[5]); got != 1.5 {
		t.Errorf("float32 = %v", got)
	}
}

func TestPackLaunchArgsRejectsAmbiguousTypes(t *testing.T) {
	// int and float64 have no fixed kernel counterpart: passing them would
	// silently mis-size a parameter.
	for _, arg := range []any{int(1), float64(1), nil, uintptr(1), "x", new(int32)} {
		if p, err := packLaunchArgs([]any{int32(0), arg}); err == nil {
			p.free()
			t.Errorf("packLaunchArgs accepted %T", arg)
		}
	}
}

func TestPackLaunchArgsEmpty(t *testing.T) {
	p, err := packLaunchArgs(nil)
	if err != nil || p.params != nil {
		t.Errorf("no args: params %v, err %v; want nil, nil", p.params, err)
	}
	p.free()
}

func TestHostBufViews(t *testing.T) {
	backing := make([]uint64, 3) // 24 bytes, 8-byte aligned
	h := HostBuf{Ptr: unsafe.Pointer(&backing[0]), Bytes: 22}
	if got := len(h.Bytes16()); got != 11 {
		t.Errorf("len(Bytes16) = %d, want 11", got)
	}
	if got := len(h.Int32()); got != 5 {
		t.Errorf("len(Int32) = %d, want 5 (whole elements only)", got)
	}
	f := h.Float32()
	f[1] = 2.5
	if got := math.Float32frombits(uint32(backing[0] >> 32)); got != 2.5 {
		t.Errorf("Float32 view does not alias the buffer: %v", got)
	}
	var zero HostBuf
	if zero.Bytes16() != nil || zero.Int32() != nil || zero.Float32() != nil {
		t.Error("views of a zero HostBuf are not nil")
	}
}

func TestCheckCount(t *testing.T) {
	tests := []struct {
		count   int
		skip    bool
		wantErr bool
	}{{-1, true, true}, {0, true, false}, {1, false, false}}
	for _, tt := range tests {
		skip, err := checkCount("x", tt.count)
		if skip != tt.skip || (err != nil) != tt.wantErr {
			t.Errorf("checkCount(%d) = %v, %v", tt.count, skip, err)
		}
	}
}
