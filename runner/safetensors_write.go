package runner

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// HostTensor is one tensor to write: its bytes are little-endian elements of
// DType (a safetensors dtype name such as "BF16", "F16", "F32") in row-major
// order, len(Data) == product(Shape) × element size.
type HostTensor struct {
	Name, DType string
	Shape       []int
	Data        []byte
}

// safetensorsEntry is one tensor's header entry as the format spells it.
type safetensorsEntry struct {
	DType       string `json:"dtype"`
	Shape       []int  `json:"shape"`
	DataOffsets [2]int `json:"data_offsets"`
}

// WriteSafetensors writes tensors, in the given order, and metadata (may be
// nil) to path as one safetensors file. Any dtype the format names may be
// written, so that tests can build files the reader must refuse. The file is
// written beside path and renamed into place, so a failure never leaves a
// partial file at path.
func WriteSafetensors(path string, tensors []HostTensor, metadata map[string]string) error {
	header, err := safetensorsHeader(tensors, metadata)
	if err != nil {
		return fmt.Errorf("write safetensors %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write safetensors: %w", err)
	}
	tmpName := tmp.Name()
	w := bufio.NewWriterSize(tmp, 1<<20)
	var lengthPrefix [8]byte
	binary.LittleEndian.PutUint64(lengthPrefix[:], uint64(len(header)))
	_, err = w.Write(lengthPrefix[:])
	if err == nil {
		_, err = w.Write(header)
	}
	for _, t := range tensors {
		if err == nil {
			_, err = w.Write(t.Data)
		}
	}
	if err == nil {
		err = w.Flush()
	}
	err = errors.Join(err, tmp.Close())
	if err == nil {
		err = os.Rename(tmpName, path)
	}
	if err != nil {
		_ = os.Remove(tmpName)
		return fmt.Errorf("write safetensors %s: %w", path, err)
	}
	return nil
}

// safetensorsHeader validates tensors and returns the JSON header, padded
// with spaces to a multiple of 8 bytes so the data section stays aligned.
func safetensorsHeader(tensors []HostTensor, metadata map[string]string) ([]byte, error) {
	entries := make(map[string]any, len(tensors)+1)
	if len(metadata) > 0 {
		entries[safetensorsMetadata] = metadata
	}
	offset := 0
	for _, t := range tensors {
		if t.Name == "" || t.Name == safetensorsMetadata {
			return nil, fmt.Errorf("tensor name %q is reserved or empty", t.Name)
		}
		if _, dup := entries[t.Name]; dup {
			return nil, fmt.Errorf("tensor %q appears twice", t.Name)
		}
		elemBytes, known := safetensorsDTypeBytes(t.DType)
		if !known {
			return nil, fmt.Errorf("tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		wantBytes := elemBytes
		for _, d := range t.Shape {
			if d < 0 {
				return nil, fmt.Errorf("tensor %q: shape %v has a negative dimension", t.Name, t.Shape)
			}
			if d != 0 && wantBytes > math.MaxInt/d {
				return nil, fmt.Errorf("tensor %q: shape %v overflows", t.Name, t.Shape)
			}
			wantBytes *= d
		}
		if wantBytes != len(t.Data) {
			return nil, fmt.Errorf("tensor %q: shape %v × %d bytes (%s) = %d bytes, but Data holds %d",
				t.Name, t.Shape, elemBytes, t.DType, wantBytes, len(t.Data))
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{} // a scalar: JSON [] rather than null
		}
		entries[t.Name] = safetensorsEntry{DType: t.DType, Shape: shape, DataOffsets: [2]int{offset, offset + len(t.Data)}}
		offset += len(t.Data)
	}
	header, err := json.Marshal(entries) // map keys come out sorted: deterministic files
	if err != nil {
		return nil, fmt.Errorf("encode header: %w", err)
	}
	if pad := (8 - len(header)%8) % 8; pad > 0 {
		header = append(header, bytes.Repeat([]byte(" "), pad)...)
	}
	return header, nil
}
