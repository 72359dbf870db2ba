package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// rooflineDoc is what the tests read of roofline --format json.
type rooflineDoc struct {
	Shapes []struct {
		Batch        int    `json:"batch_size"`
		InputLen     int    `json:"input_len"`
		Lens         string `json:"context_lens"`
		KVTokens     int    `json:"kv_tokens"`
		KVCacheDType string `json:"kv_cache_dtype"`
		Floors       struct {
			Prefill struct {
				Bytes  float64 `json:"bytes"`
				Tokens int     `json:"tokens"`
			} `json:"prefill"`
			Decode []struct {
				Bytes    float64 `json:"bytes"`
				KVTokens int     `json:"kv_tokens"`
				Ops      []struct {
					Op    string  `json:"op"`
					Bytes float64 `json:"bytes"`
				} `json:"ops"`
			} `json:"decode"`
		} `json:"floors"`
	} `json:"shapes"`
}

func rooflineJSON(t *testing.T, args ...string) rooflineDoc {
	t.Helper()
	code, stdout, stderr := run(t, append([]string{"roofline", "--format", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("roofline %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	var doc rooflineDoc
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Shapes) != 1 || len(doc.Shapes[0].Floors.Decode) == 0 {
		t.Fatalf("roofline %s: want one shape with decode steps: %s", strings.Join(args, " "), stdout)
	}
	return doc
}

// The done-when check: roofline --context-lens 1024,3072 counts exactly
// 2048 tokens' KV bytes more in a decode step than --context-lens
// 1024,1024 (Llama-3-8B: 32 layers × K and V × 8 KV heads × 128 × 2 bytes =
// 131072 bytes a token). On the paged layout the whole step differs by
// that; on the contiguous one (the default) the ragged batch's step also
// advances its views through the block table (28 bytes a sequence more
// than the uniform batch's one position), so its attention does.
func TestRooflineContextLensCountTheKVBytesOfTheLengths(t *testing.T) {
	const kvBytes = 2048 * 32 * 2 * 8 * 128 * 2
	attention := func(doc rooflineDoc) float64 {
		for _, op := range doc.Shapes[0].Floors.Decode[0].Ops {
			if op.Op == "attention" {
				return op.Bytes
			}
		}
		t.Fatal("no attention op in the first decode step")
		return 0
	}
	for _, layout := range []string{"contiguous", "paged"} {
		even := rooflineJSON(t, "--context-lens", "1024,1024", "--kv-layout", layout)
		ragged := rooflineJSON(t, "--context-lens", "1024,3072", "--kv-layout", layout)
		if got := attention(ragged) - attention(even); got != kvBytes {
			t.Errorf("%s: the decode step's attention reads %.0f bytes more, want %d (2048 tokens)", layout, got, kvBytes)
		}
		diff := ragged.Shapes[0].Floors.Decode[0].Bytes - even.Shapes[0].Floors.Decode[0].Bytes
		if want := float64(kvBytes); layout == "paged" && diff != want {
			t.Errorf("paged: the decode step moves %.0f bytes more, want %.0f", diff, want)
		} else if layout == "contiguous" && diff != kvBytes+2*28 {
			t.Errorf("contiguous: the decode step moves %.0f bytes more, want %d (the KV's and the views' advance)", diff, kvBytes+2*28)
		}
		if s := ragged.Shapes[0]; s.Batch != 2 || s.InputLen != 2048 || s.Lens != "1024,3072" || s.KVTokens != 4096 || s.Floors.Decode[0].KVTokens != 4098 {
			t.Errorf("%s: shape %+v", layout, s)
		}
	}
}

// The text table, as a user reads it: the decode step's kv_tokens and
// kv_GB columns, and the lengths under the table.
func TestRooflineContextLensTable(t *testing.T) {
	code, stdout, stderr := run(t, "roofline", "--context-lens", "1024,3072")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	row := regexp.MustCompile(`(?m)^\s+2\s+2048\s+16\s+decode first\s+3073\s+4098\s+0\.537\s`)
	if !row.MatchString(stdout) || !strings.Contains(stdout, "batch 2, output 16: context lengths 1024,3072") {
		t.Errorf("no decode row at kv_len 3073, 4098 KV tokens, 0.537 GB, or no lengths:\n%s", stdout)
	}
	// A synthetic fill's prefill runs one token per sequence.
	doc := rooflineJSON(t, "--context-lens", "1024,3072", "--kv-fill", "synthetic")
	if p := doc.Shapes[0].Floors.Prefill; p.Tokens != 2 {
		t.Errorf("synthetic fill: the prefill runs %d tokens, want 2", p.Tokens)
	}
	// A distribution is drawn per batch size with --seed, as run draws it.
	a := rooflineJSON(t, "--context-lens", "uniform:100-4000", "--batch-size", "8", "--seed", "7")
	b := rooflineJSON(t, "--context-lens", "uniform:100-4000", "--batch-size", "8", "--seed", "7")
	c := rooflineJSON(t, "--context-lens", "uniform:100-4000", "--batch-size", "8", "--seed", "8")
	if a.Shapes[0].Lens == "" || a.Shapes[0].Lens != b.Shapes[0].Lens || a.Shapes[0].Lens == c.Shapes[0].Lens {
		t.Errorf("lengths of seeds 7, 7, 8: %q %q %q", a.Shapes[0].Lens, b.Shapes[0].Lens, c.Shapes[0].Lens)
	}
	for _, bad := range [][]string{
		{"--context-lens", "1024,3072", "--input-len", "64"},
		{"--context-lens", "1024,3072", "--batch-size", "2"},
		{"--context-lens", "0,5"},
		{"--kv-fill", "maybe"},
		{"--page-size", "16"},
	} {
		if code, _, stderr := run(t, append([]string{"roofline"}, bad...)...); code != exitUsage || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("roofline %s: exit %d, want %d in one line: %s", strings.Join(bad, " "), code, exitUsage, stderr)
		}
	}
}

// --kv-cache-dtype fp8: the decode step's attention reads one byte per
// cached element (half the bf16 cache's, plus each layer's K and V
// scales), the table's kv_GB halves and says why.
func TestRooflineFP8Cache(t *testing.T) {
	attention := func(doc rooflineDoc) float64 {
		for _, op := range doc.Shapes[0].Floors.Decode[0].Ops {
			if op.Op == "attention" {
				return op.Bytes
			}
		}
		t.Fatal("no attention op in the first decode step")
		return 0
	}
	bf16 := rooflineJSON(t, "--context-lens", "1024,3072", "--kv-cache-dtype", "auto")
	fp8 := rooflineJSON(t, "--context-lens", "1024,3072", "--kv-cache-dtype", "fp8")
	const kvBytes = 4098 * 32 * 2 * 8 * 128 // K and V of 4098 tokens in 32 layers, 8 KV heads of 128, one byte each
	const qOut = 32 * 2 * 2 * 32 * 128 * 2  // q read and out written: 2 tokens, 32 heads of 128, bf16, 32 layers
	const scales = 32 * 2 * 4 * 8           // each layer's K and V scales
	if got := attention(fp8); got != kvBytes+qOut+scales || attention(bf16) != 2*kvBytes+qOut {
		t.Errorf("the decode step's attention reads %.0f bytes (bf16 %.0f), want %d (bf16 %d)", got, attention(bf16), kvBytes+qOut+scales, 2*kvBytes+qOut)
	}
	if fp8.Shapes[0].KVCacheDType != "fp8_e4m3" || bf16.Shapes[0].KVCacheDType != "" {
		t.Errorf("shapes' kv_cache_dtype %q (fp8), %q (auto)", fp8.Shapes[0].KVCacheDType, bf16.Shapes[0].KVCacheDType)
	}
	code, stdout, stderr := run(t, "roofline", "--context-lens", "1024,3072", "--kv-cache-dtype", "fp8")
	row := regexp.MustCompile(`(?m)^\s+2\s+2048\s+16\s+decode first\s+3073\s+4098\s+0\.269\s`)
	if code != 0 || !row.MatchString(stdout) || !strings.Contains(stdout, "KV cache fp8_e4m3: one byte per cached element") {
		t.Errorf("exit %d: no decode row with 0.269 GB of KV or no note:\n%s%s", code, stdout, stderr)
	}
}
