package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// setMerges reads model.merges in either form the library writes: "a b"
// strings (one space between the two tokens; older files) or ["a", "b"]
// pairs (tokenizers 0.20 on). Both tokens and their concatenation must be
// in the vocabulary. A pair listed twice keeps its later rank, as the
// library's map does.
func (t *Tokenizer) setMerges(raw json.RawMessage, vocab map[string]int32) error {
	var pairs [][2]string
	var asStrings []string
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return errors.New(`model.merges is missing or null: byte-level BPE needs a list (empty when there are no merges)`)
	}
	if err := json.Unmarshal(raw, &asStrings); err == nil {
		pairs = make([][2]string, len(asStrings))
		for i, s := range asStrings {
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return fmt.Errorf("model.merges[%d] %q is not two tokens separated by one space", i, s)
			}
			pairs[i] = [2]string{a, b}
		}
	} else {
		var asPairs [][]string
		if err := json.Unmarshal(raw, &asPairs); err != nil {
			return errors.New(`model.merges is neither a list of "a b" strings nor of ["a", "b"] pairs`)
		}
		pairs = make([][2]string, len(asPairs))
		for i, p := range asPairs {
			if len(p) != 2 {
				return fmt.Errorf("model.merges[%d] has %d tokens, not 2", i, len(p))
			}
			pairs[i] = [2]string{p[0], p[1]}
		}
	}
	t.merges = make(map[uint64]merge, len(pairs))
	var joined []byte
	for rank, p := range pairs {
		ids := [2]int32{}
		for side, token := range p {
			id, ok := vocab[token]
			if !ok {
				return fmt.Errorf("model.merges[%d] (%q %q) names %q, which is not in model.vocab", rank, p[0], p[1], token)
			}
			ids[side] = id
		}
		joined = append(append(joined[:0], p[0]...), p[1]...)
		result, ok := vocab[string(joined)]
		if !ok {
			return fmt.Errorf("model.merges[%d] (%q %q) makes %q, which is not in model.vocab", rank, p[0], p[1], p[0]+p[1])
		}
		t.merges[pairKey(ids[0], ids[1])] = merge{rank: int32(rank), result: result}
	}
	return nil
}

// setAdded reads added_tokens. An added token's id is either new or the
// vocabulary's own id for the same text; lstrip, rstrip and single_word
// (which Llama-3 does not use) are refused rather than ignored.
func (t *Tokenizer) setAdded(added []addedTokenJSON, vocab map[string]int32, bl *byteLevel) error {
	size := len(t.known)
	for _, a := range added {
		if a.ID < 0 || a.ID >= maxID {
			return fmt.Errorf("added_tokens: %q has id %d, outside [0, %d)", a.Content, a.ID, maxID)
		}
		size = max(size, int(a.ID)+1)
	}
	t.text = append(t.text, make([][]byte, size-len(t.text))...)
	t.known = append(t.known, make([]bool, size-len(t.known))...)
	raw, normalized := map[string]int32{}, map[string]int32{}
	t.added.ids = map[string]int32{}
	for _, a := range added {
		id := int32(a.ID)
		if prev, dup := t.added.ids[a.Content]; dup {
			if prev != id {
				return fmt.Errorf("added_tokens: %q listed twice, with ids %d and %d", a.Content, prev, id)
			}
			continue
		}
		switch vocabID, inVocab := vocab[a.Content]; {
		case a.Content == "":
			return fmt.Errorf("added_tokens: id %d has no content", id)
		case a.LStrip || a.RStrip || a.SingleWord:
			return fmt.Errorf("added_tokens: %q uses lstrip, rstrip or single_word, which stepbench does not support", a.Content)
		case inVocab && vocabID != id:
			return fmt.Errorf("added_tokens: %q has id %d, but model.vocab gives it %d", a.Content, id, vocabID)
		case !inVocab && t.known[id]:
			return fmt.Errorf("added_tokens: duplicate id %d (%q and %q)", id, a.Content, t.text[id])
		}
		t.known[id] = true
		t.text[id], _ = bl.bytes(a.Content)
		t.added.ids[a.Content] = id
		if a.Special {
			t.special[id] = true
		}
		if a.Normalized {
			// The library matches a normalized token by its normalized
			// content (AddedVocabulary::refresh_added_tokens).
			normalized[t.normalize(a.Content)] = id
		} else {
			raw[a.Content] = id
		}
	}
	t.added.raw, t.added.normed = newTokenSet(raw), newTokenSet(normalized)
	t.added.normalizedPass = len(normalized) > 0
	return nil
}

// setTemplate reads the post-processor: none, ByteLevel (which only trims
// offsets), TemplateProcessing, or a Sequence of them; the single-sequence
// template's special tokens become the prefix and suffix around the text.
func (t *Tokenizer) setTemplate(raw json.RawMessage) error {
	var p struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
		Single     []struct {
			SpecialToken *struct{ ID string } `json:"SpecialToken"`
			Sequence     *struct{ ID string } `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if kindOf(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("%s: %v", kindOf(raw), err)
	}
	switch p.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for _, part := range p.Processors {
			if err := t.setTemplate(part); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
	default:
		return fmt.Errorf("%s is not supported (Llama-3's is ByteLevel and TemplateProcessing)", p.Type)
	}
	if len(t.prefix)+len(t.suffix) > 0 {
		return errors.New("two TemplateProcessing templates")
	}
	sequences := 0
	for _, piece := range p.Single {
		switch {
		case piece.Sequence != nil && piece.Sequence.ID == "A":
			sequences++
		case piece.SpecialToken != nil:
			ids := p.SpecialTokens[piece.SpecialToken.ID].IDs
			if len(ids) == 0 {
				return fmt.Errorf("the template's special token %q has no ids in special_tokens", piece.SpecialToken.ID)
			}
			for _, id := range ids {
				if !t.Known(id) {
					return fmt.Errorf("the template's special token %q has id %d, which is not in the vocabulary", piece.SpecialToken.ID, id)
				}
			}
			if sequences == 0 {
				t.prefix = append(t.prefix, ids...)
			} else {
				t.suffix = append(t.suffix, ids...)
			}
		default:
			return errors.New("the single template holds a piece that is neither a SpecialToken nor Sequence A")
		}
	}
	if sequences != 1 {
		return fmt.Errorf("the single template holds the sequence %d times, not once", sequences)
	}
	return nil
}
