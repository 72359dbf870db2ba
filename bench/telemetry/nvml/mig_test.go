package nvml

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// migNVML is a mock NVML with one GPU ("GPU-aaaa", max SM clock 1980 MHz)
// holding one MIG instance ("MIG-bbbb", which answers no clock query). It
// records every UUID looked up.
func migNVML(missing ...string) (*mock.Interface, *[]string) {
	gpu := &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-aaaa", nvml.SUCCESS },
		GetMaxClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
			if c == nvml.CLOCK_SM {
				return 1980, nvml.SUCCESS
			}
			return 2619, nvml.SUCCESS
		},
		GetMemoryBusWidthFunc:        func() (uint32, nvml.Return) { return 5120, nvml.SUCCESS },
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) { return 9, 0, nvml.SUCCESS },
		GetEnforcedPowerLimitFunc:    func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS },
	}
	notSupported := func() nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	mig := &mock.Device{
		GetNameFunc:                            func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3 MIG 1g.10gb", nvml.SUCCESS },
		GetUUIDFunc:                            func() (string, nvml.Return) { return "MIG-bbbb", nvml.SUCCESS },
		GetMaxClockInfoFunc:                    func(nvml.ClockType) (uint32, nvml.Return) { return 0, notSupported() },
		GetMemoryBusWidthFunc:                  func() (uint32, nvml.Return) { return 0, notSupported() },
		GetCudaComputeCapabilityFunc:           func() (int, int, nvml.Return) { return 9, 0, nvml.SUCCESS },
		GetEnforcedPowerLimitFunc:              func() (uint32, nvml.Return) { return 0, notSupported() },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) { return gpu, nvml.SUCCESS },
	}
	var looked []string
	ext := &mock.ExtendedInterface{LookupSymbolFunc: func(name string) error {
		if slices.Contains(missing, name) {
			return errors.New("undefined symbol " + name)
		}
		return nil
	}}
	lib := &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "580.65.06", nvml.SUCCESS },
		ExtensionsFunc:             func() nvml.ExtendedInterface { return ext },
		ErrorStringFunc:            func(r nvml.Return) string { return map[nvml.Return]string{nvml.ERROR_NOT_FOUND: "Not Found"}[r] },
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			looked = append(looked, uuid)
			switch uuid {
			case "GPU-aaaa":
				return gpu, nvml.SUCCESS
			case "MIG-bbbb":
				return mig, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
	return lib, &looked
}

func TestMonitorMatchesMIGInstances(t *testing.T) {
	tests := []struct {
		name        string
		uuid        string
		missing     []string
		wantLooked  []string
		wantUUID    string
		wantMIG     string
		wantSMClock float64
		wantErr     string
	}{
		{name: "a whole GPU", uuid: "GPU-aaaa", wantLooked: []string{"GPU-aaaa"}, wantUUID: "GPU-aaaa", wantSMClock: 1980},
		{
			name: "a MIG UUID is looked up as is, never as GPU-MIG-...", uuid: "MIG-bbbb",
			wantLooked: []string{"MIG-bbbb"}, wantUUID: "GPU-aaaa", wantMIG: "MIG-bbbb", wantSMClock: 1980,
		},
		{
			name: "a driver that cannot tell MIG apart: GPU- form, then MIG-", uuid: "GPU-bbbb",
			wantLooked: []string{"GPU-bbbb", "MIG-bbbb"}, wantUUID: "GPU-aaaa", wantMIG: "MIG-bbbb", wantSMClock: 1980,
		},
		{
			name: "no parent lookup in this NVML: the instance's own handle", uuid: "MIG-bbbb",
			missing:    []string{"nvmlDeviceGetDeviceHandleFromMigDeviceHandle"},
			wantLooked: []string{"MIG-bbbb"}, wantUUID: "MIG-bbbb", wantMIG: "MIG-bbbb", wantSMClock: 0,
		},
		{
			name: "unknown: both forms named in the error", uuid: "GPU-cccc",
			wantLooked: []string{"GPU-cccc", "MIG-cccc"},
			wantErr:    "nvmlDeviceGetHandleByUUID(GPU-cccc, then MIG-cccc): Not Found (6)",
		},
		{
			name: "unknown MIG UUID", uuid: "MIG-cccc", wantLooked: []string{"MIG-cccc"},
			wantErr: "nvmlDeviceGetHandleByUUID(MIG-cccc): Not Found (6)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib, looked := migNVML(tt.missing...)
			m, err := New(lib, tt.uuid)
			if !slices.Equal(*looked, tt.wantLooked) {
				t.Errorf("looked up %q, want %q", *looked, tt.wantLooked)
			}
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.UUID != tt.wantUUID || m.MIGUUID != tt.wantMIG || m.MaxSMClockMHz != tt.wantSMClock {
				t.Errorf("UUID %q, MIGUUID %q, max SM clock %v; want %q, %q, %v", m.UUID, m.MIGUUID, m.MaxSMClockMHz, tt.wantUUID, tt.wantMIG, tt.wantSMClock)
			}
		})
	}
}

// STEPBENCH_CUDA_LIBS applies to NVML too: a folder without it is a clear
// error that still counts as "no NVML" (the run goes on without telemetry).
func TestOpenMonitorHonoursCUDALibsDir(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("STEPBENCH_CUDA_LIBS", dir)
	_, err := Open("")
	if !errors.Is(err, ErrNoNVML) {
		t.Fatalf("err = %v, want ErrNoNVML", err)
	}
	if want := "STEPBENCH_CUDA_LIBS=" + dir + ": " + dir + "/libnvidia-ml.so.1 not found"; !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want it to contain %q", err, want)
	}
}
