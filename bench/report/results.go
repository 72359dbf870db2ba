package report

import (
	"errors"
	"fmt"
	"io"

	"stepbench/bench"
	"stepbench/bench/compat"
)

// OutputFile is a file a run reads or writes, labelled (in errors) by the
// flag that named it.
type OutputFile struct {
	Label, Path string
	// Appended: records are appended to it, one JSON value per line (the
	// one_batch JSONL, --logits-out), rather than the file replaced.
	Appended bool
}

// ResultFiles are a run's result files; an empty Path leaves one out.
type ResultFiles struct {
	OneBatchJSONL OutputFile // one_batch records, appended
	VLLMJSON      OutputFile // vLLM latency JSON, one file per shape (VLLMPath)
	Native        OutputFile // the native report
	// SeveralShapes says the sweep has more than one shape, so VLLMPath
	// gives every shape its own file.
	SeveralShapes bool
	RunName       string
	// Device marks the one_batch and vLLM files of a run whose times are a
	// CPU's (compat.Device): their device field and the run name's suffix.
	Device string
	// VLLMLines, when not nil, receives vLLM's summary lines of each shape
	// written to VLLMJSON.
	VLLMLines io.Writer
}

// ResultWriter writes each shape's results as soon as the shape ends, so
// that an interrupted or failed run keeps every finished shape: the
// one_batch record is appended and synced, the shape's vLLM file and the
// native report (every shape so far) are replaced atomically. A shape that
// stopped early goes to the native report only (marked incomplete): the
// other formats cannot say so.
type ResultWriter struct {
	files   ResultFiles
	report  Report
	written map[string]bool
	order   []string
}

// NewResultWriter writes to files; header is the native report's
// environment and configuration (its shapes are added by AddShape).
func NewResultWriter(files ResultFiles, header Report) *ResultWriter {
	header.Shapes = []ShapeReport{}
	return &ResultWriter{files: files, report: header, written: map[string]bool{}}
}

// AddShape writes one finished shape; sr is its report form (with
// telemetry and floors when the caller has them). Every output is tried:
// one that fails (a full disk) does not keep the shape from the others.
func (w *ResultWriter) AddShape(s bench.ShapeResult, sr ShapeReport) error {
	f := w.files
	var errs []error
	if s.Complete && f.OneBatchJSONL.Path != "" {
		if err := compat.AppendOneBatchJSONL(f.OneBatchJSONL.Path, []compat.OneBatchRecord{w.oneBatchRecord(s)}); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", f.OneBatchJSONL.Label, f.OneBatchJSONL.Path, err))
		} else {
			w.note(f.OneBatchJSONL.Path)
		}
	}
	if s.Complete && f.VLLMJSON.Path != "" {
		errs = append(errs, w.writeVLLM(s))
	}
	w.report.Shapes = append(w.report.Shapes, sr)
	return errors.Join(append(errs, w.writeNative())...)
}

// oneBatchRecord is the shape's one_batch record, marked when the times are a CPU's.
func (w *ResultWriter) oneBatchRecord(s bench.ShapeResult) compat.OneBatchRecord {
	rec := compat.NewOneBatchRecord(compat.MarkedRunName(w.files.RunName, w.files.Device), s)
	rec.Device = w.files.Device
	return rec
}

func (w *ResultWriter) writeVLLM(s bench.ShapeResult) error {
	f := w.files.VLLMJSON
	path := compat.VLLMPath(f.Path, w.files.SeveralShapes, s.Batch, s.InputLen, s.OutputLen)
	doc, err := compat.VLLMLatencyOf(s)
	if err != nil {
		return fmt.Errorf("%s %s: %w", f.Label, path, err)
	}
	doc.Device = w.files.Device
	if err := doc.Write(path); err != nil {
		return fmt.Errorf("%s %s: %w", f.Label, path, err)
	}
	w.note(path)
	if w.files.VLLMLines != nil {
		fmt.Fprintf(w.files.VLLMLines, "vLLM latency of %s (%s):\n%s", s.Shape, path, doc.SummaryLines())
	}
	return nil
}

// Rewrite replaces the native report's header and shapes (the final
// environment, roofs and telemetry of a run) and writes it again.
func (w *ResultWriter) Rewrite(header Report, shapes []ShapeReport) error {
	header.Shapes = append([]ShapeReport{}, shapes...)
	w.report = header
	return w.writeNative()
}

func (w *ResultWriter) writeNative() error {
	f := w.files.Native
	if f.Path == "" {
		return nil
	}
	if err := Write(f.Path, w.report); err != nil {
		return fmt.Errorf("%s %s: %w", f.Label, f.Path, err)
	}
	w.note(f.Path)
	return nil
}

func (w *ResultWriter) note(path string) {
	if !w.written[path] {
		w.written[path] = true
		w.order = append(w.order, path)
	}
}

// Written lists the files written so far, in first-written order.
func (w *ResultWriter) Written() []string { return append([]string(nil), w.order...) }

// Shapes is the count of shapes written.
func (w *ResultWriter) Shapes() int { return len(w.report.Shapes) }
