package ref

import (
	"math"
	"testing"
)

// The log-sum-exp of one query over two keys, by hand: scores s_j =
// (q·k_j)/√D, lse = ln(e^s0 + e^s1); a second sequence's keys, through a
// shuffled table, are its own.
func TestAttentionPagedLSE(t *testing.T) {
	const D = 4
	one, two := F32ToBF16(1), F32ToBF16(2)
	// Pages of 2 slots: sequence 0 on page 1 (slots 2, 3), sequence 1 on page 0 (slot 0).
	kCache := []uint16{
		two, two, two, two, // slot 0: sequence 1's key
		0, 0, 0, 0,
		one, 0, 0, 0, // slot 2: sequence 0's key 0
		one, one, 0, 0, // slot 3: sequence 0's key 1
	}
	q := []uint16{one, one, one, one, one, 0, 0, 0}
	kv := PagedKV{PageSize: 2, NumPages: 2, MaxPages: 1, BlockTable: []int32{1, 0}, SeqLens: []int32{2, 1}, QueryStart: []int32{0, 1, 2}}
	lse := make([]float32, 2)
	AttentionPagedLSE(lse, q, kCache, kv, 1, 1, D, nil)
	want0 := math.Log(math.Exp(1.0/2) + math.Exp(2.0/2))
	want1 := 2.0 / 2 // one key: lse = its score, (1·2)/√4
	if math.Abs(float64(lse[0])-want0) > 1e-6 || math.Abs(float64(lse[1])-want1) > 1e-6 {
		t.Errorf("lse = %v, want [%g %g]", lse, want0, want1)
	}
}
