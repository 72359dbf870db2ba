package ref

import (
	"math"
	"slices"
	"testing"
)

// Published values: splitmix64's first output from state 0 (Vigna's reference
// code) and FNV-1a-64 of "" and "a" (the FNV specification's test vectors).
func TestMix64AndNameHashKnownValues(t *testing.T) {
	if got := Mix64(0 + golden64); got != 0xe220a8397b1dcdaf {
		t.Errorf("Mix64(golden) = %#016x, want splitmix64's first output 0xe220a8397b1dcdaf", got)
	}
	tests := []struct {
		name string
		want uint64
	}{
		{"", 0xcbf29ce484222325},
		{"a", 0xaf63dc4c8601ec8c},
	}
	for _, tc := range tests {
		if got := NameHash(tc.name); got != tc.want {
			t.Errorf("NameHash(%q) = %#016x, want %#016x", tc.name, got, tc.want)
		}
	}
}

// Golden values computed once with the generator as written. The CUDA
// generator (kernels/dummy.cu) must reproduce them; if this test fails, dummy
// weights changed and every recorded dummy-weight result is no longer comparable.
func TestDummyGolden(t *testing.T) {
	tests := []struct {
		seed  uint64
		name  string
		first uint64
		want  []uint16
	}{
		{0, "model.embed_tokens.weight", 0,
			[]uint16{0x3ca8, 0xbc41, 0x3cad, 0x3c25, 0x3ccf, 0x3c3b, 0x3be8, 0x3bf4}},
		{0, "model.embed_tokens.weight", 1 << 40,
			[]uint16{0xbc53, 0x3b53, 0x3cb8, 0xbc68, 0x3c8d, 0xbbdc, 0xbc81, 0x3c65}},
		{1234, "model.layers.0.self_attn.q_proj.weight", 0,
			[]uint16{0xbcb6, 0x3cda, 0xbc32, 0xbcf3, 0x3c89, 0xbc3d, 0xbbc8, 0x3c89}},
		{1234, "model.layers.0.self_attn.q_proj.weight", 1 << 40,
			[]uint16{0x3bf3, 0x3ca3, 0xba91, 0x3bc3, 0x3bc2, 0x3ced, 0x3b4b, 0xbc5f}},
	}
	if got := DummyKey(0, "model.embed_tokens.weight"); got != 0xfcdda326e57a698a {
		t.Errorf("DummyKey = %#016x, want 0xfcdda326e57a698a", got)
	}
	for _, tc := range tests {
		got := make([]uint16, len(tc.want))
		FillDummy(got, tc.seed, tc.name, tc.first, DummyUniform)
		if !slices.Equal(got, tc.want) {
			t.Errorf("FillDummy(seed %d, %q, first %d) = %#04x, want %#04x", tc.seed, tc.name, tc.first, got, tc.want)
		}
		// A chunk taken from the middle equals the same elements of a whole fill.
		key := DummyKey(tc.seed, tc.name)
		for i, w := range tc.want {
			if e := DummyElem(key, tc.first+uint64(i), DummyUniform); e != w {
				t.Errorf("DummyElem(%d) = %#04x, want %#04x", tc.first+uint64(i), e, w)
			}
		}
	}
}

func TestDummyUniformProperties(t *testing.T) {
	const n = 1 << 16
	values := make([]uint16, n)
	FillDummy(values, 7, "model.layers.3.mlp.down_proj.weight", 12345, DummyUniform)
	var sum, sumSquares float64
	atBound := 0
	for i, bits := range values {
		v := f64(bits)
		if v == 0 || math.IsNaN(v) {
			t.Fatalf("element %d is %g", i, v)
		}
		// The brief and dummy.go say |v| < 1/32, but bf16 rounding of the
		// largest fp32 values (|odd| >= 2^23 - 2^14, about 1 in 512) lands on
		// exactly ±1/32, so the bound that holds is |v| <= 1/32.
		if math.Abs(v) > 1.0/32 {
			t.Fatalf("element %d = %g, |v| > 1/32", i, v)
		}
		if math.Abs(v) == 1.0/32 {
			atBound++
		}
		sum += v
		sumSquares += v * v
	}
	if atBound == 0 || atBound > n/128 {
		t.Errorf("%d of %d elements are ±1/32, want about 1 in 512", atBound, n)
	}
	// Uniform on (-1/32, 1/32): mean 0, variance (1/32)²/3. Loose 6-sigma bounds.
	mean := sum / n
	variance := sumSquares/n - mean*mean
	wantVariance := 1.0 / (32 * 32 * 3)
	if sigma := math.Sqrt(wantVariance / n); math.Abs(mean) > 6*sigma {
		t.Errorf("mean %g, want 0 ± %g", mean, 6*sigma)
	}
	if math.Abs(variance-wantVariance) > 0.05*wantVariance {
		t.Errorf("variance %g, want %g", variance, wantVariance)
	}
}

func TestDummyOnes(t *testing.T) {
	values := make([]uint16, 100)
	FillDummy(values, 99, "model.norm.weight", 5, DummyOnes)
	for i, v := range values {
		if v != 0x3f80 {
			t.Fatalf("ones[%d] = %#04x, want 0x3f80", i, v)
		}
	}
}

func TestDummyKeyDependsOnSeedAndName(t *testing.T) {
	keys := map[uint64]string{}
	for _, seed := range []uint64{0, 1, 2, 1 << 63} {
		for _, name := range []string{"a", "b", "model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight"} {
			key := DummyKey(seed, name)
			if prev, dup := keys[key]; dup {
				t.Errorf("seed %d %q has the same key as %s", seed, name, prev)
			}
			keys[key] = name
		}
	}
	// Different keys give different streams, not a shifted copy of one.
	a := make([]uint16, 64)
	b := make([]uint16, 64)
	FillDummy(a, 1, "x", 0, DummyUniform)
	FillDummy(b, 2, "x", 0, DummyUniform)
	if slices.Equal(a, b) {
		t.Error("seeds 1 and 2 give the same tensor")
	}
	FillDummy(b, 1, "y", 0, DummyUniform)
	if slices.Equal(a, b) {
		t.Error("names x and y give the same tensor")
	}
}

// A column block filled in one call equals its rows filled one by one.
func TestFillDummyRowsIsRowsOfFillDummy(t *testing.T) {
	const rows, cols, stride, first = 5, 7, 20, 3
	got := make([]uint16, rows*cols)
	FillDummyRows(got, cols, 9, "w", first, stride, DummyUniform)
	for r := 0; r < rows; r++ {
		want := make([]uint16, cols)
		FillDummy(want, 9, "w", first+uint64(r*stride), DummyUniform)
		for c := range want {
			if got[r*cols+c] != want[c] {
				t.Fatalf("row %d col %d: %#04x, want %#04x", r, c, got[r*cols+c], want[c])
			}
		}
	}
}
