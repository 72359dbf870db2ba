package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"stepbench/cuda"
	"stepbench/internal/input"
)

// An op library is a user's code that runs inside stepbench. Before this
// process loads one, a re-executed stepbench (probeCommand; a fork of a
// multithreaded Go process is unsafe) loads it and looks up its op: a
// crash there (its constructors, stepbench_op_abi_version,
// stepbench_op_get) or a load that never ends is named here, in one line
// with the library and the call, and this process never loads it. A crash
// in the run's own calls is named by the crash handler (cuda's).

// probeCommand is the hidden subcommand of the probe: OP PATH NVRTC
// CUBLAS (the --nvrtc and --cublas paths, "" for the search).
const probeCommand = "__probe-op-library"

// Exit codes of the probe: probeOK, probeBad (the library is refused: its
// one line on stderr), probeNoGPU (no device to probe on: the backend's
// own open then says why).
const (
	probeOK    = 0
	probeBad   = 2
	probeNoGPU = 3
)

// probeEnv is added to the probe's environment: in cmd/stepbench's tests,
// whose executable is the test binary, what makes it stepbench.
var probeEnv []string

// maxProbeOutput bounds what the probe's stderr keeps (a library may write
// without end).
const maxProbeOutput = 16 << 10

// probeOpLibraries probes each of ops' libraries (op → absolute path) in
// a child process, within the setup timeout; flags' --nvrtc and --cublas
// are opened there first, as the backend opens them (a library that
// dlopens libnvrtc.so.13 by name gets the one stepbench loaded).
func probeOpLibraries(flag string, ops map[string]string, flags backendFlags) error {
	for op, path := range ops {
		if err := probeOpLibrary(flag, op, path, flags, setupTimeout(0)); err != nil {
			return err
		}
	}
	return nil
}

func probeOpLibrary(flag, op, path string, flags backendFlags, timeout time.Duration) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%s %s=%s: probe the library: %w", flag, op, path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, probeCommand, op, path, flags.nvrtcPath, flags.cublasPath)
	cmd.Env = append(os.Environ(), probeEnv...)
	stderr := &limitedBuffer{max: maxProbeOutput}
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	err = cmd.Run()
	line := firstLine(stderr.String())
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s %s=%s: loading the library and looking up %s (dlopen, its constructors, stepbench_op_get) did not finish within %s (a call that never returns?)",
			flag, op, path, op, timeout)
	case err == nil:
		return nil
	case !errors.As(err, &exit):
		return fmt.Errorf("%s %s=%s: probe the library: %w", flag, op, path, err)
	}
	status := exit.Sys().(syscall.WaitStatus)
	switch {
	case status.Signaled() && strings.HasPrefix(line, "stepbench: op library "):
		return input.Bad(errors.New(strings.TrimPrefix(line, "stepbench: ")))
	case status.Signaled():
		return input.Bad(fmt.Errorf("%s %s=%s: the library crashed as it was loaded (%v)", flag, op, path, status.Signal()))
	case status.ExitStatus() == probeNoGPU:
		return nil
	case status.ExitStatus() == probeBad:
		// "op library PATH: PATH: file too short" (dlerror names it too) says PATH once.
		why := strings.TrimPrefix(strings.TrimPrefix(line, "op library "+path+": "), path+": ")
		return input.Bad(fmt.Errorf("%s %s=%s: %s", flag, op, path, why))
	}
	return fmt.Errorf("%s %s=%s: the probe of the library exited %d: %s", flag, op, path, status.ExitStatus(), line)
}

// probeMain is the probe: with the CUDA libraries open as the backend
// opens them, load the library at args[1] on device 0 and look up op
// args[0], each call labelled for the crash handler.
func probeMain(args []string, stderr io.Writer) int {
	if len(args) != 4 {
		fmt.Fprintf(stderr, "usage: %s OP PATH NVRTC CUBLAS\n", probeCommand)
		return probeBad
	}
	op, path := args[0], args[1]
	if err := cuda.InstallCrashHandler(); err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailure
	}
	drv, err := cuda.OpenDriver()
	if err != nil {
		return probeNoGPU
	}
	gpuCtx, err := drv.NewContext(0)
	if err != nil {
		return probeNoGPU
	}
	defer gpuCtx.Close()
	if _, err := cuda.OpenNVRTC(args[2]); err != nil {
		return probeNoGPU
	}
	if _, err := cuda.OpenCublas(args[3]); err != nil {
		return probeNoGPU
	}
	done := cuda.LabelCrashes(path, "", "its load (dlopen: its constructors; stepbench_op_abi_version)")
	lib, err := cuda.OpenOpLibrary(path)
	done()
	if err != nil {
		fmt.Fprintln(stderr, cuda.Sanitize(err.Error(), 2048))
		return probeBad
	}
	done = cuda.LabelCrashes(path, op, "stepbench_op_get")
	_, err = lib.Op(op)
	done()
	if err != nil {
		fmt.Fprintln(stderr, cuda.Sanitize(err.Error(), 2048))
		return probeBad
	}
	return probeOK
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.Len(); room > 0 {
		l.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// firstLine is text's first line, sanitized for a terminal.
func firstLine(text string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
	return cuda.Sanitize(line, 2048)
}
