package bench

import "fmt"

// One_batch's stdout lines (SGLang bench_one_batch.py, latency_test_run_once),
// byte for byte: Python's {x:6.5f} and {x:9.2f} are Go's %6.5f and %9.2f.

// prefillLine's tokens are the prefill's: batch × input_len, a ragged
// batch's prompts (Shape.PromptTokens).
func prefillLine(tokens int, latencySeconds float64) string {
	return fmt.Sprintf("Prefill. latency: %6.5f s, throughput: %9.2f token/s",
		latencySeconds, TokensPerSecond(tokens, latencySeconds))
}

func decodeStepLine(step, batch int, latencySeconds float64) string {
	return fmt.Sprintf("Decode %d. Batch size: %d, latency: %6.5f s, throughput: %9.2f token/s",
		step, batch, latencySeconds, TokensPerSecond(batch, latencySeconds))
}

func decodeMedianLine(batch int, medianSeconds float64) string {
	return fmt.Sprintf("Decode.  median latency: %6.5f s, median throughput: %9.2f token/s",
		medianSeconds, TokensPerSecond(batch, medianSeconds))
}

// totalLine's tokens are the iteration's (Shape.IterationTokens).
func totalLine(tokens int, totalSeconds float64) string {
	return fmt.Sprintf("Total. latency: %6.3f s, throughput: %9.2f token/s",
		totalSeconds, TokensPerSecond(tokens, totalSeconds))
}
