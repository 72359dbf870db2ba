package progress

import (
	"os"
	"syscall"
	"unsafe"
)

// Terminal says whether f is a terminal (TERM not "dumb") and its width in
// columns (0 when unknown).
func Terminal(f *os.File) (bool, int) {
	if f == nil || os.Getenv("TERM") == "dumb" {
		return false, 0
	}
	var t syscall.Termios
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t))); e != 0 {
		return false, 0
	}
	var ws struct{ rows, cols, x, y uint16 }
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TIOCGWINSZ, uintptr(unsafe.Pointer(&ws))); e != 0 {
		return true, 0
	}
	return true, int(ws.cols)
}
