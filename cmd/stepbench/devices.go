package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"stepbench/cuda"
)

// devicesCmd lists the driver, every GPU and the NVRTC and cuBLAS found.
func devicesCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("devices", stderr)
	var nvrtcPath, cublasPath string
	registerLibraryFlags(fs, &nvrtcPath, &cublasPath)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	drv, err := cuda.OpenDriver()
	if err != nil {
		return fmt.Errorf("no usable GPU: %w", withEmulatorHint(err))
	}
	version, err := drv.Version()
	if err != nil {
		return fmt.Errorf("no usable GPU: %w", err)
	}
	count, err := drv.DeviceCount()
	if err != nil {
		return fmt.Errorf("no usable GPU: %w", err)
	}
	if count == 0 {
		return errors.New("no usable GPU: the CUDA driver sees no device")
	}
	fmt.Fprintf(stdout, "CUDA driver API %s, %d device(s), from %s\n", cudaVersionString(version), count, drv.Path())
	if desc := drv.Emulated(); desc != "" {
		fmt.Fprintf(stdout, "  EMULATED driver: %s\n", desc)
		fmt.Fprintln(stdout, "  its devices run kernels on the CPU: their times are not GPU times")
	}
	for i := 0; i < count; i++ {
		p, err := drv.Props(i)
		if err != nil {
			return fmt.Errorf("device %d: %w", i, err)
		}
		fmt.Fprintf(stdout, "\nGPU %d: %s\n", i, p.Name)
		if p.MIG {
			fmt.Fprintf(stdout, "  uuid                 %s (a MIG compute instance)\n", p.UUID)
		} else {
			fmt.Fprintf(stdout, "  uuid                 %s\n", p.UUID)
		}
		fmt.Fprintf(stdout, "  compute capability   %d.%d (kernels compile for sm_%d%d)\n", p.Major, p.Minor, p.Major, p.Minor)
		fmt.Fprintf(stdout, "  SMs                  %d\n", p.SMCount)
		fmt.Fprintf(stdout, "  memory               %.2f GB (%d-bit bus)\n", float64(p.TotalMemBytes)/1e9, p.MemBusWidthBits)
		fmt.Fprintf(stdout, "  L2 cache             %.1f MiB\n", float64(p.L2Bytes)/(1<<20))
		fmt.Fprintf(stdout, "  shared per block     %d KiB (opt-in)\n", p.MaxSharedPerBlockOptinBytes/1024)
		fmt.Fprintf(stdout, "  max SM clock         %s\n", clockString(p.ClockKHz))
		fmt.Fprintf(stdout, "  max memory clock     %s\n", clockString(p.MemClockKHz))
	}
	fmt.Fprintln(stdout)
	var missing []error
	if n, err := cuda.OpenNVRTC(nvrtcPath); err != nil {
		fmt.Fprintf(stdout, "NVRTC   not found: %v\n", err)
		missing = append(missing, fmt.Errorf("NVRTC: %w", err))
	} else {
		major, minor := n.Version()
		archs, archErr := n.SupportedArchs()
		archText := fmt.Sprint(archs)
		if archErr != nil {
			archText = archErr.Error()
		}
		fmt.Fprintf(stdout, "NVRTC   %d.%d at %s (archs %s)\n", major, minor, n.Path(), archText)
		printLibraryChoice(stdout, n.Emulated(), n.Choice())
	}
	if b, err := cuda.OpenCublas(cublasPath); err != nil {
		fmt.Fprintf(stdout, "cuBLAS  not found: %v\n", err)
		missing = append(missing, fmt.Errorf("cuBLAS: %w", err))
	} else {
		if v, err := b.Version(); err != nil {
			fmt.Fprintf(stdout, "cuBLAS  at %s, version unknown: %v\n", b.Path(), err)
		} else {
			fmt.Fprintf(stdout, "cuBLAS  %s at %s\n", cublasVersionString(v), b.Path())
		}
		printLibraryChoice(stdout, b.Emulated(), b.Choice())
	}
	if len(missing) > 0 {
		return fmt.Errorf("no usable GPU: %w", errors.Join(missing...))
	}
	return nil
}

// printLibraryChoice says, under a library's line, whether it is emulated,
// why it was chosen and which companions were opened with it.
func printLibraryChoice(w io.Writer, emulated string, c cuda.LibraryChoice) {
	if emulated != "" {
		fmt.Fprintf(w, "        EMULATED: %s\n", emulated)
	}
	if c.File != "" && c.File != c.Path {
		fmt.Fprintf(w, "        file %s\n", c.File)
	}
	fmt.Fprintf(w, "        chosen from %s: %s\n", c.Source, c.Reason)
	if len(c.Companions) > 0 {
		fmt.Fprintf(w, "        opened first from its folder: %s\n", strings.Join(c.Companions, ", "))
	}
}

func clockString(kHz int) string {
	if kHz == 0 {
		return "not reported by this driver"
	}
	return fmt.Sprintf("%d MHz", kHz/1000)
}
