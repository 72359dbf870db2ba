package kernelbench

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"stepbench/runner"
)

func TestParseRaggedShape(t *testing.T) {
	decode := []runner.SeqSpec{{Context: 128, Prompt: 1}, {Context: 4096, Prompt: 1}, {Context: 512, Prompt: 1}}
	for _, tc := range []struct {
		in    string
		want  Shape
		label string // "" : an error
	}{
		{"batch=3,lens=128;4096;512", Shape{Batch: 3, SeqLen: 1, Seqs: decode}, "batch=3/seq=1/pos=128:4096:512"},
		{"lens=128:4096:512", Shape{Batch: 3, SeqLen: 1, Seqs: decode}, "batch=3/seq=1/pos=128:4096:512"},
		{"pos=128:4096:512,seq=1", Shape{Batch: 3, SeqLen: 1, Seqs: decode}, "batch=3/seq=1/pos=128:4096:512"},
		{"seq=5:9", Shape{Batch: 2, SeqLen: 9, Seqs: []runner.SeqSpec{{Prompt: 5}, {Prompt: 9}}}, "batch=2/seq=5:9/pos=0"},
		{"seq=4,lens=100;300", Shape{Batch: 2, SeqLen: 4, Seqs: []runner.SeqSpec{{Context: 100, Prompt: 4}, {Context: 300, Prompt: 4}}},
			"batch=2/seq=4/pos=100:300"},
		{"lens=7;7", Shape{Batch: 2, SeqLen: 1, StartPos: 7}, "batch=2/seq=1/pos=7"},
		{"batch=2,lens=1;2;3", Shape{}, ""},
		{"pos=1,lens=2", Shape{}, ""},
		{"lens=2,pos=1", Shape{}, ""},
		{"seq=1:2,pos=3:4:5", Shape{}, ""},
		{"seq=0:3", Shape{}, ""},
		{"lens=1;x", Shape{}, ""},
		{"batch=2;3", Shape{}, ""},
	} {
		got, err := ParseShape(tc.in)
		if (err != nil) != (tc.label == "") || err == nil && (!reflect.DeepEqual(got, tc.want) || got.Label() != tc.label) {
			t.Errorf("ParseShape(%q) = %+v (%s), %v; want %+v (%s)", tc.in, got, got.Label(), err, tc.want, tc.label)
		}
	}
	long := make([]runner.SeqSpec, 12)
	for i := range long {
		long[i] = runner.SeqSpec{Context: 100 * (i + 1), Prompt: 1}
	}
	s := RaggedShape(long)
	s.KV = runner.KVOptions{Layout: runner.KVPaged, PageSize: 16, Order: runner.PagesShuffled}
	if l := s.Label(); !strings.HasPrefix(l, "batch=12/seq=1/pos=100..1200/kv=7812/h=") || !strings.HasSuffix(l, "/paged=16/shuffled") {
		t.Errorf("label %q", l)
	}
	other := slices.Clone(long)
	other[5].Context++
	if RaggedShape(other).Label() == RaggedShape(long).Label() {
		t.Error("two lists of 12 lengths share a label")
	}
}

// A ragged step's op costs one of the calls of that op in the model's own
// step at the same lengths and layout (the cost model's ragged decode step
// and varlen prefill), and the op runs on the cpu backend through the
// block table.
func TestRaggedOpCostIsTheCostModels(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	lens := []int{5, 40, 17}
	be := runner.NewCPU()
	for _, kv := range []runner.KVOptions{{}, {Layout: runner.KVPaged, PageSize: 16, Order: runner.PagesShuffled, Seed: 3}, {Layout: runner.KVPaged, PageSize: 1}} {
		var decodeSeqs, prefillSeqs []runner.SeqSpec
		for _, n := range lens {
			decodeSeqs, prefillSeqs = append(decodeSeqs, runner.SeqSpec{Context: n, Prompt: 1}), append(prefillSeqs, runner.SeqSpec{Prompt: n})
		}
		decode, err := runner.DecodeCostSeqs(cfg, 0, lens, kv)
		if err != nil {
			t.Fatal(err)
		}
		prefill, err := runner.PrefillCostSeqs(cfg, 0, prefillSeqs, kv)
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct {
			seqs []runner.SeqSpec
			cost runner.StepCost
		}{{decodeSeqs, decode}, {prefillSeqs, prefill}} {
			s := RaggedShape(step.seqs)
			s.KV = kv
			for _, op := range Ops() {
				got, err := OpCost(cfg, op, s)
				if err != nil {
					t.Fatal(err)
				}
				if calls := step.cost.CallCosts(op); got.Calls != 1 || got.Bytes <= 0 || !slices.Contains(calls, got) {
					t.Errorf("%s at %s: cost %+v is none of the step's %d calls (%+v)", op, s.Label(), got, len(calls), calls[:min(len(calls), 1)])
				}
			}
			for _, op := range []string{"rope_kv_write", "attention"} {
				k, _, err := NewOp(be, cfg, op, s, 0)
				if err != nil {
					t.Fatalf("%s at %s: %v", op, s.Label(), err)
				}
				if _, err := Measure(k, Options{MinSamples: 2, MaxSamples: 2, MaxNoise: 1, Timeout: time.Minute}); err != nil {
					t.Errorf("%s at %s: %v", op, s.Label(), err)
				}
				if err := k.Close(); err != nil {
					t.Error(err)
				}
			}
		}
	}
}
