//go:build !linux

package progress

import "os"

// Terminal says whether f is a character device (a terminal, most likely);
// the width is unknown (0).
func Terminal(f *os.File) (bool, int) {
	if f == nil || os.Getenv("TERM") == "dumb" {
		return false, 0
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0, 0
}
