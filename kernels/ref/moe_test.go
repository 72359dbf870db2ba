package ref

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestRouterTopK(t *testing.T) {
	bf := func(v ...float32) []uint16 {
		out := make([]uint16, len(v))
		ToBF16(out, v)
		return out
	}
	e2 := float32(math.Exp(2))
	sum := 1 + e2 + float32(math.E) + e2
	for _, tc := range []struct {
		name        string
		logits      []uint16
		experts, k  int
		renormalize bool
		ids         []int32
		weights     []float32
	}{
		{"tie to the lower index", bf(0, 2, 1, 2), 4, 2, false, []int32{1, 3}, []float32{e2 / sum, e2 / sum}},
		{"renormalized", bf(0, 2, 1, 2), 4, 2, true, []int32{1, 3}, []float32{0.5, 0.5}},
		{"two tokens, k 1", bf(3, -1, -1, 5), 2, 1, true, []int32{0, 1}, []float32{1, 1}},
	} {
		tokens := len(tc.logits) / tc.experts
		ids, weights := make([]int32, tokens*tc.k), make([]float32, tokens*tc.k)
		RouterTopK(ids, weights, tc.logits, tokens, tc.experts, tc.k, tc.renormalize)
		if !slices.Equal(ids, tc.ids) {
			t.Errorf("%s: ids %v, want %v", tc.name, ids, tc.ids)
		}
		for i := range weights {
			if math.Abs(float64(weights[i]-tc.weights[i])) > 1e-6 {
				t.Errorf("%s: weights %v, want %v", tc.name, weights, tc.weights)
				break
			}
		}
	}
}

func TestMoEAlign(t *testing.T) {
	// Slots 0..5 of [[0,2],[2,1],[2,0]]: expert 0 has 0 and 5, expert 1 has
	// 3, expert 2 has 1, 2 and 4, expert 3 none; the pad is 6.
	sorted, expertOf, n := MoEAlign([]int32{0, 2, 2, 1, 2, 0}, 4, 2)
	if want := []int32{0, 5, 3, 6, 1, 2, 4, 6}; !slices.Equal(sorted, want) || n != 8 {
		t.Errorf("sorted %v (%d), want %v (8)", sorted, n, want)
	}
	if want := []int32{0, 1, 2, 2}; !slices.Equal(expertOf, want) {
		t.Errorf("expert of each block %v, want %v", expertOf, want)
	}
	if _, _, n := MoEAlign([]int32{3, 3, 3}, 4, 16); n != 16 {
		t.Errorf("three slots of one expert in blocks of 16: %d padded, want 16", n)
	}
}

// One expert at weight 1 is the dense MLP, bit for bit; several are the
// float32 sum of each expert's weighted output; a wrong expert index
// changes the result.
func TestFusedMoE(t *testing.T) {
	const tokens, hidden, inter, experts, k = 3, 64, 48, 4, 2
	r := rand.New(rand.NewPCG(1, 2))
	x := randomBF16(r, tokens*hidden, 0.5)
	w13 := randomBF16(r, experts*2*inter*hidden, 0.1)
	w2 := randomBF16(r, experts*hidden*inter, 0.1)
	dense := func(e int, row int) []uint16 {
		gu, act, y := make([]uint16, 2*inter), make([]uint16, inter), make([]uint16, hidden)
		Linear(gu, x[row*hidden:(row+1)*hidden], w13[e*2*inter*hidden:(e+1)*2*inter*hidden], 1, 2*inter, hidden)
		SiluMul(act, gu, 1, inter)
		Linear(y, act, w2[e*hidden*inter:(e+1)*hidden*inter], 1, hidden, inter)
		return y
	}
	out := make([]uint16, tokens*hidden)
	FusedMoE(out, x, w13, w2, []int32{2, 0, 3}, []float32{1, 1, 1}, tokens, hidden, inter, experts, 1)
	for row, e := range []int{2, 0, 3} {
		if got, want := out[row*hidden:(row+1)*hidden], dense(e, row); !slices.Equal(got, want) {
			t.Fatalf("token %d, expert %d at weight 1: not the dense MLP's output", row, e)
		}
	}
	ids, weights := []int32{1, 3, 0, 2, 3, 1}, []float32{0.7, 0.3, 0.6, 0.4, 0.5, 0.5}
	FusedMoE(out, x, w13, w2, ids, weights, tokens, hidden, inter, experts, k)
	for row := 0; row < tokens; row++ {
		acc := make([]float32, hidden)
		for j := 0; j < k; j++ {
			unrounded := make([]float32, hidden) // the down projection before its bf16 rounding
			act := make([]uint16, inter)
			gu := make([]uint16, 2*inter)
			e := int(ids[row*k+j])
			Linear(gu, x[row*hidden:(row+1)*hidden], w13[e*2*inter*hidden:(e+1)*2*inter*hidden], 1, 2*inter, hidden)
			SiluMul(act, gu, 1, inter)
			for h := range unrounded {
				var s float64
				for n := 0; n < inter; n++ {
					s += float64(BF16ToF32(act[n])) * float64(BF16ToF32(w2[e*hidden*inter+h*inter+n]))
				}
				unrounded[h] = float32(s)
			}
			for h := range acc {
				acc[h] += RoundBF16(weights[row*k+j] * unrounded[h])
			}
		}
		want := make([]uint16, hidden)
		ToBF16(want, acc)
		for h := range want {
			// float64 sums here, float32 there: a bf16 step apart at most.
			if d := int(out[row*hidden+h]) - int(want[h]); d > 1 || d < -1 {
				t.Fatalf("token %d output %d: %v, want %v", row, h, BF16ToF32(out[row*hidden+h]), BF16ToF32(want[h]))
			}
		}
	}
	wrong := make([]uint16, tokens*hidden)
	FusedMoE(wrong, x, w13, w2, []int32{1, 2, 0, 2, 3, 1}, weights, tokens, hidden, inter, experts, k)
	if slices.Equal(wrong[:hidden], out[:hidden]) {
		t.Error("token 0 routed to expert 2 instead of 3 gives the same output")
	}
}

// The expectation of experts touched, against every routing of a small
// case enumerated.
func TestExpectedExpertsTouched(t *testing.T) {
	const experts, k, tokens = 5, 2, 3
	var choices []uint
	for m := uint(0); m < 1<<experts; m++ {
		if bits.OnesCount(m) == k {
			choices = append(choices, m)
		}
	}
	total, count := 0, 0
	var walk func(depth int, union uint)
	walk = func(depth int, union uint) {
		if depth == tokens {
			total += bits.OnesCount(union)
			count++
			return
		}
		for _, c := range choices {
			walk(depth+1, union|c)
		}
	}
	walk(0, 0)
	if got, want := ExpectedExpertsTouched(experts, k, tokens), float64(total)/float64(count); math.Abs(got-want) > 1e-12 {
		t.Errorf("E=%d k=%d T=%d: %v, enumerated %v", experts, k, tokens, got, want)
	}
	if got := ExpectedExpertsTouched(128, 8, 1); got != 8 {
		t.Errorf("one token touches %v of Qwen3-30B-A3B's experts, want 8", got)
	}
	// docs/moe.md's and moe.cu's figure for a decode step of 32 tokens.
	if got := ExpectedExpertsTouched(128, 8, 32); math.Abs(got-111.77) > 0.01 {
		t.Errorf("32 tokens touch %v of Qwen3-30B-A3B's experts, the docs say 111.8", got)
	}
}
