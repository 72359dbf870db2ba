package runner

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// raggedRun runs seqs (with the concatenated prompts) for steps decode
// steps under kv and returns each step's logits and next ids, the prefill's
// first.
func raggedRun(t *testing.T, e *Engine, kv KVOptions, seqs []SeqSpec, prompts []int32, steps int) ([][][]float32, [][]int32) {
	t.Helper()
	if err := e.SetKVOptions(kv); err != nil {
		t.Fatal(err)
	}
	if err := e.BeginSeqs(seqs, steps+1, prompts); err != nil {
		t.Fatal(err)
	}
	var logits [][][]float32
	var next [][]int32
	for step := 0; step <= steps; step++ {
		var err error
		if step == 0 {
			err = e.Prefill()
		} else {
			err = e.Decode()
		}
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		l, err := e.Logits()
		if err != nil {
			t.Fatal(err)
		}
		n, err := e.NextTokens()
		if err != nil {
			t.Fatal(err)
		}
		logits, next = append(logits, l), append(next, n)
	}
	return logits, next
}

// TestRaggedBatchIsEachSequenceAlone: on the cpu backend, every sequence of
// a ragged batch gets, at the prefill and every decode step, the logits
// and tokens it gets alone on the contiguous layout, bit for bit (its ops
// are row by row), at page sizes 1, 16 and 64, in order and shuffled.
func TestRaggedBatchIsEachSequenceAlone(t *testing.T) {
	e := tinyEngine(t)
	r := rand.New(rand.NewPCG(3, 4))
	lens := []int{5, 1, 17, 16, 33}
	var seqs []SeqSpec
	var prompts []int32
	for _, n := range lens {
		seqs = append(seqs, SeqSpec{Prompt: n})
		prompts = append(prompts, randomPrompt(r, n, e.Config().VocabSize)...)
	}
	const steps = 3
	alone := make([][][]float32, len(lens)) // [seq][step] logits
	at := 0
	for b, n := range lens {
		l, _ := raggedRun(t, e, KVOptions{}, []SeqSpec{{Prompt: n}}, prompts[at:at+n], steps)
		for _, step := range l {
			alone[b] = append(alone[b], step[0])
		}
		at += n
	}
	layouts := []KVOptions{{Layout: KVContiguous}}
	for _, ps := range []int{1, 16, 64} {
		for _, order := range []string{PagesSequential, PagesShuffled} {
			layouts = append(layouts, KVOptions{Layout: KVPaged, PageSize: ps, Order: order, Seed: 11, PoisonTable: true})
		}
	}
	for _, kv := range layouts {
		t.Run(kv.String(), func(t *testing.T) {
			logits, _ := raggedRun(t, e, kv, seqs, prompts, steps)
			if !e.Tabled() {
				t.Fatal("a ragged batch ran without the block table")
			}
			for step := range logits {
				for b := range lens {
					if !slices.Equal(logits[step][b], alone[b][step]) {
						t.Errorf("step %d, sequence %d (prompt %d): logits differ from the sequence alone", step, b, lens[b])
					}
				}
			}
		})
	}
}

// TestPagedUniformIsContiguous: a uniform batch on pages gives the
// contiguous layout's bits, and the engine reports the table it used.
func TestPagedUniformIsContiguous(t *testing.T) {
	e := tinyEngine(t)
	r := rand.New(rand.NewPCG(5, 6))
	const batch, n, steps = 3, 9, 2
	prompts := randomPrompt(r, batch*n, e.Config().VocabSize)
	seqs := []SeqSpec{{Prompt: n}, {Prompt: n}, {Prompt: n}}
	want, wantNext := raggedRun(t, e, KVOptions{}, seqs, prompts, steps)
	if e.Tabled() {
		t.Fatal("a uniform contiguous batch ran through the table")
	}
	got, gotNext := raggedRun(t, e, KVOptions{Layout: KVPaged, PageSize: 4, Order: PagesShuffled, Seed: 1}, seqs, prompts, steps)
	for step := range want {
		if !slices.Equal(gotNext[step], wantNext[step]) {
			t.Errorf("step %d: tokens %v, contiguous %v", step, gotNext[step], wantNext[step])
		}
		for b := range batch {
			if !slices.Equal(got[step][b], want[step][b]) {
				t.Errorf("step %d, sequence %d: paged logits differ from contiguous", step, b)
			}
		}
	}
	p := e.Plan()
	if p.PageSize != 4 || p.NumPages != batch*3 || p.MaxPages != 3 { // 9+3−1 = 11 positions: 3 pages of 4
		t.Errorf("plan %d pages of %d, %d per sequence; want 9 of 4, 3 each", p.NumPages, p.PageSize, p.MaxPages)
	}
}

// TestContextFillThenDecode: sequences with a filled context run their
// prompt over it (chunked prefill) and decode at their own positions; the
// lengths move on by one per step.
func TestContextFillThenDecode(t *testing.T) {
	e := tinyEngine(t)
	seqs := []SeqSpec{{Context: 40, Prompt: 1}, {Context: 3, Prompt: 2}, {Context: 0, Prompt: 7}}
	prompts := make([]int32, 10)
	for i := range prompts {
		prompts[i] = int32(i + 1)
	}
	for _, kv := range []KVOptions{{Layout: KVPaged, PageSize: 16, Order: PagesShuffled, Seed: 2, PoisonTable: true}, {}} {
		raggedRun(t, e, kv, seqs, prompts, 2)
		if got, want := e.Lengths(), []int{43, 7, 9}; !slices.Equal(got, want) {
			t.Errorf("%s: lengths after the prefill and 2 steps %v, want %v", kv, got, want)
		}
	}
}

func TestPlanKV(t *testing.T) {
	for _, tc := range []struct {
		positions             []int
		kv                    KVOptions
		pageSize, pages, maxP int
	}{
		{[]int{5, 17}, KVOptions{}, 17, 2, 1},
		{[]int{5, 17}, KVOptions{Layout: KVPaged}, 16, 3, 2},
		{[]int{16, 16, 1}, KVOptions{Layout: KVPaged, PageSize: 16}, 16, 3, 1},
		{[]int{3, 4}, KVOptions{Layout: KVPaged, PageSize: 1}, 1, 7, 4},
	} {
		t.Run(fmt.Sprint(tc.positions, tc.kv), func(t *testing.T) {
			p := PlanKV(tc.positions, tc.kv)
			if p.PageSize != tc.pageSize || p.NumPages != tc.pages || p.MaxPages != tc.maxP {
				t.Fatalf("page size %d, %d pages, %d per sequence; want %d, %d, %d", p.PageSize, p.NumPages, p.MaxPages,
					tc.pageSize, tc.pages, tc.maxP)
			}
			seen := map[int64]bool{}
			for b, n := range tc.positions {
				for j := range n {
					s := p.Slot(b, j)
					if s < 0 || s >= int64(p.Slots()) || seen[s] {
						t.Fatalf("sequence %d position %d: slot %d (of %d) out of the pool or shared", b, j, s, p.Slots())
					}
					seen[s] = true
				}
			}
		})
	}
	shuffled := PlanKV([]int{64, 64}, KVOptions{Layout: KVPaged, PageSize: 16, Order: PagesShuffled, Seed: 9})
	if slices.Equal(shuffled.Table, []int32{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Error("the shuffled order left the pages in order")
	}
	again := PlanKV([]int{64, 64}, KVOptions{Layout: KVPaged, PageSize: 16, Order: PagesShuffled, Seed: 9})
	if !slices.Equal(shuffled.Table, again.Table) {
		t.Error("the shuffled order is not a function of its seed")
	}
}

func TestPlanSizeIsPlanKV(t *testing.T) {
	for _, kv := range []KVOptions{{}, {Layout: KVPaged}, {Layout: KVPaged, PageSize: 1}, {Layout: KVPaged, PageSize: 7}} {
		positions := []int{5, 17, 1, 33}
		p := PlanKV(positions, kv)
		slots, pages := PlanSize(positions, kv)
		if slots != p.Slots() || pages != p.MaxPages {
			t.Errorf("%s: PlanSize %d slots, %d pages; PlanKV %d, %d", kv, slots, pages, p.Slots(), p.MaxPages)
		}
	}
}

// flipGen is a Generator whose batch runs pick token 1 where the alone
// runs pick token 0, at logits gap apart; the alone runs see logits
// {1, 1-gap}, the batch {1-gap, 1}.
type flipGen struct {
	gap   float32
	batch bool
	n     int
}

func (g *flipGen) Begin(batch, inputLen, outputLen int, prompts []int32) error {
	g.batch, g.n = false, batch
	return nil
}
func (g *flipGen) BeginSeqs(seqs []SeqSpec, outputLen int, prompts []int32) error {
	g.batch, g.n = true, len(seqs)
	return nil
}
func (g *flipGen) Prefill() error                { return nil }
func (g *flipGen) Decode() error                 { return nil }
func (g *flipGen) ForceNextTokens([]int32) error { return nil }
func (g *flipGen) NextTokens() ([]int32, error) {
	ids := make([]int32, g.n)
	if g.batch {
		for i := range ids {
			ids[i] = 1
		}
	}
	return ids, nil
}
func (g *flipGen) Logits() ([][]float32, error) {
	rows := make([][]float32, g.n)
	for i := range rows {
		rows[i] = []float32{1, 1 - g.gap}
		if g.batch {
			rows[i] = []float32{1 - g.gap, 1}
		}
	}
	return rows, nil
}

// A token that differs at a near tie of the alone run's logits is allowed
// (and reported); one that differs beyond it fails the check.
func TestRaggedNearTies(t *testing.T) {
	for _, tc := range []struct {
		gap float32
		ok  bool
	}{{0.005, true}, {0.5, false}} {
		checks, err := RaggedAgainstAlone(&flipGen{gap: tc.gap}, [][]int32{{1}, {2, 3}}, 2)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range checks {
			if c.OK() != tc.ok || (tc.ok && len(c.NearTies) != 2) || (!tc.ok && c.FirstTokenDiffer != 0) {
				t.Errorf("gap %g, sequence %d: %+v", tc.gap, i, c)
			}
		}
	}
}
