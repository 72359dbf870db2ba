package kernels

import "testing"

func TestDecodePlanCoversMaxSeqWithinWorkspace(t *testing.T) {
	for _, smCount := range []int{1, 108, 132} {
		for _, batch := range []int{1, 3, 64, 256} {
			for _, kvHeads := range []int{1, 8} {
				for maxSeq := 1; maxSeq < 40000; maxSeq = maxSeq*3 + 1 {
					a := AttnShape{Batch: batch, SeqLen: 1, StartPos: maxSeq - 1, Heads: 4 * kvHeads, KVHeads: kvHeads, HeadDim: 128, MaxSeq: maxSeq}
					chunk, splits := DecodePlan(a, smCount)
					if chunk%32 != 0 || chunk < DecodeMinChunkKeys || chunk > DecodeMaxChunkKeys {
						t.Errorf("%+v sm=%d: chunk %d not a multiple of 32 in [%d, %d]", a, smCount, chunk, DecodeMinChunkKeys, DecodeMaxChunkKeys)
					}
					if splits*chunk < maxSeq || (splits-1)*chunk >= maxSeq {
						t.Errorf("%+v sm=%d: %d splits of %d keys do not tile %d positions (an empty or missing split)", a, smCount, splits, chunk, maxSeq)
					}
					// The partials, then version 3's counters: an int per sequence and kv head, to 16 bytes.
					need := batch*a.Heads*splits*(a.HeadDim+2)*4 + (batch*kvHeads*4+15)/16*16
					if have := AttentionWorkspaceBytes(a, smCount); have != need {
						t.Errorf("%+v sm=%d: workspace %d bytes, want %d", a, smCount, have, need)
					}
					if shared := DecodeSharedBytes(a, chunk); shared > DefaultSharedLimitBytes {
						t.Errorf("%+v: decode needs %d shared bytes", a, shared)
					}
				}
			}
		}
	}
}

// A captured decode step replays at every position: its plan and workspace
// must not change with StartPos.
func TestDecodePlanIndependentOfStartPos(t *testing.T) {
	base := AttnShape{Batch: 2, SeqLen: 1, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 10000}
	chunk0, splits0 := DecodePlan(base, 132)
	ws0 := AttentionWorkspaceBytes(base, 132)
	for startPos := 0; startPos < base.MaxSeq; startPos += 37 {
		a := base
		a.StartPos = startPos
		chunk, splits := DecodePlan(a, 132)
		if chunk != chunk0 || splits != splits0 {
			t.Fatalf("startPos %d: plan (%d, %d), at 0 (%d, %d)", startPos, chunk, splits, chunk0, splits0)
		}
		if ws := AttentionWorkspaceBytes(a, 132); ws != ws0 {
			t.Fatalf("startPos %d: workspace %d, at 0 %d", startPos, ws, ws0)
		}
	}
	prefill := AttnShape{Batch: 2, SeqLen: 5, Heads: 32, KVHeads: 8, HeadDim: 128, MaxSeq: 10}
	if got := AttentionWorkspaceBytes(prefill, 132); got != 0 {
		t.Errorf("prefill workspace = %d, want 0", got)
	}
}

func TestPrefillSharedFitsHopperAndAmpere(t *testing.T) {
	const ampereOptinBytes = 163 * 1024
	for _, d := range SupportedHeadDims {
		if b := PrefillSharedBytes(d); b > ampereOptinBytes {
			t.Errorf("head dim %d: prefill needs %d shared bytes > %d", d, b, ampereOptinBytes)
		}
	}
}

// attn_decode 6's grid holds every step a run can reach: whatever the
// lengths (1 to any capacity), its items per kv head number fewer than
// the grid's target + batch, no item has more than the chunk, the chunk is
// at least the keys per target item; the grid and the workspace depend on
// the batch, heads and GPU only, never on the lengths or the capacity.
func TestDecode6GridHoldsAnyLengths(t *testing.T) {
	state := uint64(7)
	next := func(n int) int {
		state = state*6364136223846793005 + 1442695040888963407
		return int((state >> 33) % uint64(n))
	}
	for trial := range 2000 {
		batch := 1 + next(300)
		capacity := 1 + next(1<<17)
		a := AttnShape{Batch: batch, SeqLen: 1, Heads: 32, KVHeads: []int{1, 2, 8, 32}[trial%4], HeadDim: 128, PageSize: 16, MaxPages: CeilDiv(capacity, 16), NumPages: batch, Paged: true}
		lens := make([]int, batch)
		for b := range lens {
			switch next(4) {
			case 0:
				lens[b] = 1
			case 1:
				lens[b] = capacity
			default:
				lens[b] = 1 + next(capacity)
			}
		}
		for _, sms := range []int{1, 108, 132} {
			target, items := Decode6Grid(a, sms)
			chunk, total := Decode6Chunk(lens, target), 0
			for _, l := range lens {
				total += l
			}
			if n := Decode6Items(lens, target); n >= items || chunk%(Decode6Warps*Decode6SubKeys) != 0 || chunk*target < total {
				t.Fatalf("batch %d, capacity %d, %d SMs: %d items for a grid of %d, chunk %d, total %d over %d targets", batch, capacity, sms, n, items, chunk, total, target)
			}
			b := a
			b.SeqLens, b.MaxPages = lens, 1+next(1000)
			if _, again := Decode6Grid(b, sms); again != items || AttentionWorkspaceBytes(b, sms) != AttentionWorkspaceBytes(a, sms) {
				t.Fatalf("the grid or workspace moved with the lengths or the capacity")
			}
		}
	}
}
