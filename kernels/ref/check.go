package ref

import "fmt"

// needLen panics when a slice is shorter than an op needs. Every op checks its
// slices before writing anything, so a programmer error never leaves a tensor
// half updated; user input never reaches these checks (callers validate shapes).
func needLen(op, name string, have, need int) {
	if have < need {
		panic(fmt.Sprintf("ref.%s: %s has %d elements, need %d", op, name, have, need))
	}
}

// needShape panics on a negative or inconsistent dimension (programmer error).
func needShape(op string, ok bool, format string, args ...any) {
	if !ok {
		panic(fmt.Sprintf("ref.%s: "+format, append([]any{op}, args...)...))
	}
}
