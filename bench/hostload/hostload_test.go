package hostload

import "testing"

func TestParseAndFraction(t *testing.T) {
	total, busy, err := parseCPULine("cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 1 2 3\n")
	if err != nil || total != 990 || busy != 170 {
		t.Fatalf("parseCPULine: total %d busy %d, %v; want 990, 170", total, busy, err)
	}
	self, err := parseSelf("1234 (step bench) S 1 2 3 4 5 6 7 8 9 10 40 2 0 0")
	if err != nil || self != 42 {
		t.Fatalf("parseSelf: %d, %v; want 42", self, err)
	}
	a := Sample{total: 1000, busy: 100, self: 50, ok: true}
	b := Sample{total: 2000, busy: 900, self: 450, ok: true}
	if f, ok := OtherFraction(a, b); !ok || f != 0.4 {
		t.Errorf("OtherFraction = %g, %v; want 0.4 (others kept 400 of 1000 ticks)", f, ok)
	}
	if _, ok := OtherFraction(Sample{}, b); ok {
		t.Error("an unknown sample gave a fraction")
	}
	if s := Now(); !s.ok {
		t.Skip("no /proc here")
	}
}
