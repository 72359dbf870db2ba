package roofline

import (
	"math"
	"testing"

	"stepbench/runner"
)

// The README's hand derivation of `stepbench roofline --model llama-3-70b
// --tp-size 8 --gpu h100-sxm` (batch 1, input 1024): one GPU reads its
// eighth of every layer's matrices, its 16032 rows of lm_head and the norms;
// it sends 2(N−1)/N × 8192 × 2 bytes per all-reduce, 160 of them, plus the
// argmax keys' 8 bytes.
func TestLlama70BTP8FloorsByHand(t *testing.T) {
	cfg, err := runner.Preset("llama-3-70b")
	if err != nil {
		t.Fatal(err)
	}
	g, err := LookupPreset("h100-sxm")
	if err != nil {
		t.Fatal(err)
	}
	sf, err := ComputeFloorsTP(cfg, 8, g.Roof(), 1, 1024, 16)
	if err != nil {
		t.Fatal(err)
	}
	const (
		h, layers, n = 8192.0, 80.0, 8.0
		qkvRows      = (64/8 + 2*1) * 128.0 // 8 q heads and the one KV head's k and v
		oCols        = 64 / 8 * 128.0
		inter        = 28672 / 8.0
		vocabRows    = 128256 / 8.0
	)
	perLayer := qkvRows*h + h*oCols + 3*inter*h + 2*h
	weightBytes := 2 * (layers*perLayer + vocabRows*h + h)
	d := sf.Decode[0]
	if math.Abs(d.WeightBytes-weightBytes) > 0.5 {
		t.Errorf("decode weight bytes %.0f, by hand %.0f", d.WeightBytes, weightBytes)
	}
	comm := 2*layers*2*(n-1)/n*h*2 + 2*(n-1)/n*8
	if d.CommBytes != comm {
		t.Errorf("decode comm bytes %.0f, by hand %.0f", d.CommBytes, comm)
	}
	if want := 2*int(layers) + 1; d.CommCalls != want || sf.Prefill.CommCalls != want { // two per layer, the argmax keys'
		t.Errorf("collectives per step: decode %d, prefill %d, want %d", d.CommCalls, sf.Prefill.CommCalls, want)
	}
	f := sf.DecodeFloors[0]
	wantMemory := d.Bytes / 3.35e12
	if f.CommSeconds != comm/450e9 || f.Seconds != wantMemory+comm/450e9 || f.Bound != "memory" {
		t.Errorf("decode floor %+v, want memory %.4g s + comm %.4g s", f, wantMemory, comm/450e9)
	}
	if ms := f.Seconds * 1e3; math.Abs(ms-5.22) > 0.005 {
		t.Errorf("decode floor %.3f ms, the README says 5.22", ms)
	}
	p := sf.PrefillFloor
	prefillComm := 2*layers*2*(n-1)/n*1024*h*2 + 2*(n-1)/n*8
	if sf.Prefill.CommBytes != prefillComm || math.Abs(p.Seconds*1e3-28.33) > 0.005 || p.Bound != "compute" {
		t.Errorf("prefill comm %.0f (by hand %.0f), floor %+v; the README says 28.33 ms, compute-bound", sf.Prefill.CommBytes, prefillComm, p)
	}
}

func TestFloorCommWithoutLink(t *testing.T) {
	r := NewRoof(SourceDevice, "no link known", 1e15, 1e12)
	if f := r.FloorComm(0, 1e9, 1e9); f.CommSeconds != 0 || f.Seconds != 1e-3 {
		t.Errorf("without a link bandwidth the all-reduces are left out: %+v", f)
	}
	r.LinkBytesPerSec = 1e11
	if f := r.FloorComm(0, 1e9, 1e9); f.CommSeconds != 1e-2 || f.Seconds != 1.1e-2 || f.Bound != "link" {
		t.Errorf("link-bound: %+v", f)
	}
}
