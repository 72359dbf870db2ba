package cuda

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"stepbench/cuda/libdir"
)

// Device attribute numbers (CUdevice_attribute) read by Props.
const (
	attrClockRateKHz                 = 13
	attrMultiprocessorCount          = 16
	attrMemoryClockRateKHz           = 36
	attrGlobalMemoryBusWidthBits     = 37
	attrL2CacheSizeBytes             = 38
	attrComputeCapabilityMajor       = 75
	attrComputeCapabilityMinor       = 76
	attrMaxSharedMemoryPerBlockOptin = 97
)

// driverAPI holds the driver's entry points, looked up once by versioned name.
type driverAPI struct {
	cuInit, cuDriverGetVersion, cuGetErrorName                            unsafe.Pointer
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetUuid       unsafe.Pointer
	cuDeviceGetUuidV1, cuDeviceTotalMem, cuDeviceGetAttribute             unsafe.Pointer
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxSetCurrent  unsafe.Pointer
	cuMemGetInfo, cuMemAlloc, cuMemFree, cuMemAllocHost, cuMemFreeHost    unsafe.Pointer
	cuStreamCreate, cuStreamSynchronize, cuStreamDestroy                  unsafe.Pointer
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync               unsafe.Pointer
	cuMemsetD8Async, cuMemsetD16Async, cuMemsetD32Async                   unsafe.Pointer
	cuEventCreate, cuEventRecord, cuEventSynchronize, cuEventDestroy      unsafe.Pointer
	cuEventElapsedTime                                                    unsafe.Pointer
	cuModuleLoadData, cuModuleGetFunction, cuModuleUnload                 unsafe.Pointer
	cuFuncSetAttribute, cuFuncGetAttribute, cuLaunchKernel                unsafe.Pointer
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiateWithFlags unsafe.Pointer
	cuGraphDestroy, cuGraphLaunch, cuGraphExecDestroy                     unsafe.Pointer
	cuGraphGetNodes                                                       unsafe.Pointer // optional
	cuLaunchKernelEx                                                      unsafe.Pointer // optional: CUDA 11.8+
	cuProfilerStart, cuProfilerStop                                       unsafe.Pointer // optional

	// The names cuDeviceGetUuid and cuEventElapsedTime were found under
	// (the _v2 name where the driver exports it), for error messages.
	uuidName, elapsedTimeName string
}

func (a *driverAPI) slots() []symbolSlot {
	return []symbolSlot{
		{name: "cuInit", dst: &a.cuInit},
		{name: "cuDriverGetVersion", dst: &a.cuDriverGetVersion},
		{name: "cuGetErrorName", dst: &a.cuGetErrorName},
		{name: "cuDeviceGetCount", dst: &a.cuDeviceGetCount},
		{name: "cuDeviceGet", dst: &a.cuDeviceGet},
		{name: "cuDeviceGetName", dst: &a.cuDeviceGetName},
		// CUDA 13's headers map both to their _v2; the v1 names may go.
		{name: "cuDeviceGetUuid_v2", fallback: "cuDeviceGetUuid", dst: &a.cuDeviceGetUuid, resolved: &a.uuidName},
		{name: "cuDeviceGetUuid", dst: &a.cuDeviceGetUuidV1, optional: true}, // only to recognise MIG instances
		{name: "cuDeviceTotalMem_v2", dst: &a.cuDeviceTotalMem},
		{name: "cuDeviceGetAttribute", dst: &a.cuDeviceGetAttribute},
		{name: "cuDevicePrimaryCtxRetain", dst: &a.cuDevicePrimaryCtxRetain},
		{name: "cuDevicePrimaryCtxRelease_v2", dst: &a.cuDevicePrimaryCtxRelease},
		{name: "cuCtxSetCurrent", dst: &a.cuCtxSetCurrent},
		{name: "cuMemGetInfo_v2", dst: &a.cuMemGetInfo},
		{name: "cuMemAlloc_v2", dst: &a.cuMemAlloc},
		{name: "cuMemFree_v2", dst: &a.cuMemFree},
		{name: "cuMemAllocHost_v2", dst: &a.cuMemAllocHost},
		{name: "cuMemFreeHost", dst: &a.cuMemFreeHost},
		{name: "cuStreamCreate", dst: &a.cuStreamCreate},
		{name: "cuStreamSynchronize", dst: &a.cuStreamSynchronize},
		{name: "cuStreamDestroy_v2", dst: &a.cuStreamDestroy},
		{name: "cuMemcpyHtoDAsync_v2", dst: &a.cuMemcpyHtoDAsync},
		{name: "cuMemcpyDtoHAsync_v2", dst: &a.cuMemcpyDtoHAsync},
		{name: "cuMemcpyDtoDAsync_v2", dst: &a.cuMemcpyDtoDAsync},
		{name: "cuMemsetD8Async", dst: &a.cuMemsetD8Async},
		{name: "cuMemsetD16Async", dst: &a.cuMemsetD16Async},
		{name: "cuMemsetD32Async", dst: &a.cuMemsetD32Async},
		{name: "cuEventCreate", dst: &a.cuEventCreate},
		{name: "cuEventRecord", dst: &a.cuEventRecord},
		{name: "cuEventSynchronize", dst: &a.cuEventSynchronize},
		{name: "cuEventDestroy_v2", dst: &a.cuEventDestroy},
		{name: "cuEventElapsedTime_v2", fallback: "cuEventElapsedTime", dst: &a.cuEventElapsedTime, resolved: &a.elapsedTimeName},
		{name: "cuModuleLoadData", dst: &a.cuModuleLoadData},
		{name: "cuModuleGetFunction", dst: &a.cuModuleGetFunction},
		{name: "cuModuleUnload", dst: &a.cuModuleUnload},
		{name: "cuFuncSetAttribute", dst: &a.cuFuncSetAttribute},
		{name: "cuFuncGetAttribute", dst: &a.cuFuncGetAttribute},
		{name: "cuLaunchKernel", dst: &a.cuLaunchKernel},
		{name: "cuStreamBeginCapture_v2", dst: &a.cuStreamBeginCapture},
		{name: "cuStreamEndCapture", dst: &a.cuStreamEndCapture},
		{name: "cuGraphInstantiateWithFlags", dst: &a.cuGraphInstantiateWithFlags},
		{name: "cuGraphDestroy", dst: &a.cuGraphDestroy},
		{name: "cuGraphLaunch", dst: &a.cuGraphLaunch},
		{name: "cuGraphExecDestroy", dst: &a.cuGraphExecDestroy},
		{name: "cuGraphGetNodes", dst: &a.cuGraphGetNodes, optional: true},
		{name: "cuLaunchKernelEx", dst: &a.cuLaunchKernelEx, optional: true},
		{name: "cuProfilerStart", dst: &a.cuProfilerStart, optional: true},
		{name: "cuProfilerStop", dst: &a.cuProfilerStop, optional: true},
	}
}

// Driver is the opened and initialised CUDA driver (libcuda.so.1).
type Driver struct {
	lib      *library
	api      driverAPI
	emulated string
	// errorDetail and nameAllocation are the emulated driver's
	// sbemu_error_detail and sbemu_name_allocation (nil for a real driver).
	errorDetail, nameAllocation unsafe.Pointer
}

// driverSoname is the driver's ABI-stable name, installed with the kernel module.
const driverSoname = "libcuda.so.1"

// OpenDriver dlopens libcuda.so.1 (DIR/libcuda.so.1 with
// $STEPBENCH_CUDA_LIBS=DIR set), looks up every entry point and calls
// cuInit(0). Without a driver the error is "no CUDA driver: libcuda.so.1: ...".
func OpenDriver() (*Driver, error) {
	path, err := libdir.Resolve(driverSoname)
	if err != nil {
		return nil, fmt.Errorf("no CUDA driver: %w", err)
	}
	return openDriverAt(path)
}

// openDriverAt opens the driver from path; tests point it at a fake driver.
func openDriverAt(path string) (*Driver, error) {
	lib, err := openLibrary(path)
	if err != nil {
		// dlerror already names the library ("libcuda.so.1: cannot open ...").
		if !strings.HasPrefix(err.Error(), path) {
			err = fmt.Errorf("%s: %w", path, err)
		}
		return nil, fmt.Errorf("no CUDA driver: %w", err)
	}
	d := &Driver{lib: lib}
	if err := lib.resolve(d.api.slots()); err != nil {
		lib.close()
		return nil, fmt.Errorf("CUDA driver: %w", err)
	}
	d.emulated = lib.describeEmulator()
	d.errorDetail = lib.symbol("sbemu_error_detail")
	d.nameAllocation = lib.symbol("sbemu_name_allocation")
	if err := d.check(C.sb_cuInit(d.api.cuInit, 0), "cuInit(0)"); err != nil {
		lib.close()
		return nil, err
	}
	return d, nil
}

// HasLaunchEx reports whether the driver exports cuLaunchKernelEx (CUDA
// 11.8 and newer), which Stream.LaunchProgrammatic needs.
func (d *Driver) HasLaunchEx() bool { return d.api.cuLaunchKernelEx != nil }

// Path is the file or soname the driver was opened from.
func (d *Driver) Path() string { return d.lib.path }

// Emulated is the description of stepbench's emulated CUDA driver (kernels
// run on the CPU) when that is what was opened, "" for a real driver.
func (d *Driver) Emulated() string { return d.emulated }

// probeDriver asks the driver which CUDA version it supports, for choosing
// NVRTC and cuBLAS. cuDriverGetVersion needs no cuInit. The driver stays
// loaded: OpenDriver opens the same handle again, and unloading libcuda is
// not something CUDA supports.
func probeDriver(env searchEnv) driverInfo {
	path, err := env.libdirLookup().Resolve(driverSoname)
	if err != nil {
		return driverInfo{err: err}
	}
	lib, err := openLibrary(path)
	if err != nil {
		return driverInfo{err: err}
	}
	fn := lib.symbol("cuDriverGetVersion")
	if fn == nil {
		return driverInfo{err: fmt.Errorf("%s: no cuDriverGetVersion", path)}
	}
	var v C.int
	if code := C.sb_cuDriverGetVersion(fn, &v); code != 0 {
		return driverInfo{err: fmt.Errorf("%s: cuDriverGetVersion: CUresult %d", path, int(code))}
	}
	return driverInfo{version: int(v)}
}

// errorName returns the driver's name for a CUresult.
func (d *Driver) errorName(code C.CUresult) string {
	var name *C.char
	if C.sb_cuGetErrorName(d.api.cuGetErrorName, code, &name) != 0 || name == nil {
		return fmt.Sprintf("CUDA_ERROR_UNKNOWN(%d)", int(code))
	}
	return C.GoString(name)
}

// check turns a CUresult into an *Error whose Call is fmt.Sprintf(call, args...).
func (d *Driver) check(code C.CUresult, call string, args ...any) error {
	if code == 0 {
		return nil
	}
	if len(args) > 0 {
		call = fmt.Sprintf(call, args...)
	}
	e := &Error{Call: call, Code: int(code), Name: d.errorName(code)}
	if d.errorDetail != nil {
		if text := C.sb_error_detail(d.errorDetail, C.int(code)); text != nil {
			e.Detail = C.GoString(text)
		}
	}
	return e
}

// Version returns the driver's CUDA version, e.g. 13000 for 13.0.
func (d *Driver) Version() (int, error) {
	var v C.int
	if err := d.check(C.sb_cuDriverGetVersion(d.api.cuDriverGetVersion, &v), "cuDriverGetVersion"); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount returns the number of visible CUDA devices.
func (d *Driver) DeviceCount() (int, error) {
	var n C.int
	if err := d.check(C.sb_cuDeviceGetCount(d.api.cuDeviceGetCount, &n), "cuDeviceGetCount"); err != nil {
		return 0, err
	}
	return int(n), nil
}

// DeviceProps describes one device; clocks are the maximum (boost) clocks
// the driver reports.
type DeviceProps struct {
	Ordinal int
	Name    string
	// UUID is as nvidia-smi -L prints it: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
	// or "MIG-..." for a MIG compute instance (see MIG).
	UUID string
	// MIG is true when the device is a MIG compute instance: the driver
	// exports both UUID calls and they differ (cuDeviceGetUuid_v2 returns
	// the instance's UUID, cuDeviceGetUuid the whole GPU's). A driver that
	// lacks either cannot tell; bench's NVML matching then tries both
	// prefixes.
	MIG                         bool
	Major, Minor, SMCount       int
	TotalMemBytes               uint64
	L2Bytes                     int
	MaxSharedPerBlockOptinBytes int
	ClockKHz, MemClockKHz       int // 0 where the driver no longer reports them
	MemBusWidthBits             int
}

func (d *Driver) device(ordinal int) (C.CUdevice, error) {
	var dev C.CUdevice
	err := d.check(C.sb_cuDeviceGet(d.api.cuDeviceGet, &dev, C.int(ordinal)), "cuDeviceGet(%d)", ordinal)
	return dev, err
}

// Props reads the properties of device ordinal.
func (d *Driver) Props(ordinal int) (DeviceProps, error) {
	p := DeviceProps{Ordinal: ordinal}
	dev, err := d.device(ordinal)
	if err != nil {
		return p, err
	}
	const nameBytes = 256
	name := (*C.char)(C.malloc(nameBytes))
	defer C.free(unsafe.Pointer(name))
	if err := d.check(C.sb_cuDeviceGetName(d.api.cuDeviceGetName, name, nameBytes, dev), "cuDeviceGetName(%d)", ordinal); err != nil {
		return p, err
	}
	p.Name = C.GoString(name)

	raw, err := d.uuid(d.api.cuDeviceGetUuid, d.api.uuidName, dev, ordinal)
	if err != nil {
		return p, err
	}
	p.UUID = formatUUID("GPU", raw)
	if d.api.uuidName == "cuDeviceGetUuid_v2" && d.api.cuDeviceGetUuidV1 != nil {
		gpu, err := d.uuid(d.api.cuDeviceGetUuidV1, "cuDeviceGetUuid", dev, ordinal)
		if err == nil && gpu != raw {
			p.MIG, p.UUID = true, formatUUID("MIG", raw)
		}
	}

	var total C.size_t
	if err := d.check(C.sb_cuDeviceTotalMem(d.api.cuDeviceTotalMem, &total, dev), "cuDeviceTotalMem_v2(%d)", ordinal); err != nil {
		return p, err
	}
	p.TotalMemBytes = uint64(total)

	required := []struct {
		attr int
		dst  *int
		name string
	}{
		{attrComputeCapabilityMajor, &p.Major, "COMPUTE_CAPABILITY_MAJOR"},
		{attrComputeCapabilityMinor, &p.Minor, "COMPUTE_CAPABILITY_MINOR"},
		{attrMultiprocessorCount, &p.SMCount, "MULTIPROCESSOR_COUNT"},
		{attrL2CacheSizeBytes, &p.L2Bytes, "L2_CACHE_SIZE"},
		{attrMaxSharedMemoryPerBlockOptin, &p.MaxSharedPerBlockOptinBytes, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"},
		{attrGlobalMemoryBusWidthBits, &p.MemBusWidthBits, "GLOBAL_MEMORY_BUS_WIDTH"},
	}
	for _, a := range required {
		v, err := d.attribute(dev, a.attr, a.name)
		if err != nil {
			return p, err
		}
		*a.dst = v
	}
	// Clock attributes are deprecated in CUDA 13; a driver that stops
	// answering them should not make the device unusable.
	p.ClockKHz, _ = d.attribute(dev, attrClockRateKHz, "CLOCK_RATE")
	p.MemClockKHz, _ = d.attribute(dev, attrMemoryClockRateKHz, "MEMORY_CLOCK_RATE")
	return p, nil
}

func (d *Driver) attribute(dev C.CUdevice, attr int, name string) (int, error) {
	var v C.int
	err := d.check(C.sb_cuDeviceGetAttribute(d.api.cuDeviceGetAttribute, &v, C.int(attr), dev),
		"cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_%s)", name)
	return int(v), err
}

// uuid calls one of the cuDeviceGetUuid entry points.
func (d *Driver) uuid(fn unsafe.Pointer, name string, dev C.CUdevice, ordinal int) ([16]byte, error) {
	var uuid [16]C.uchar
	var raw [16]byte
	if err := d.check(C.sb_cuDeviceGetUuid(fn, &uuid[0], dev), "%s(%d)", name, ordinal); err != nil {
		return raw, err
	}
	for i, b := range uuid {
		raw[i] = byte(b)
	}
	return raw, nil
}

// formatUUID prints a device UUID the way nvidia-smi and NVML do, with
// prefix "GPU" for a GPU and "MIG" for a MIG compute instance.
func formatUUID(prefix string, b [16]byte) string {
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Context is a device's primary context made current on the calling OS
// thread. See the package documentation for the threading rule.
type Context struct {
	drv     *Driver
	dev     C.CUdevice
	ordinal int
	ctx     C.CUcontext
}

// NewContext retains device ordinal's primary context (the one cuBLAS and
// the CUDA runtime share) and makes it current on the calling thread.
func (d *Driver) NewContext(ordinal int) (*Context, error) {
	dev, err := d.device(ordinal)
	if err != nil {
		return nil, err
	}
	c := &Context{drv: d, dev: dev, ordinal: ordinal}
	if err := d.check(C.sb_cuDevicePrimaryCtxRetain(d.api.cuDevicePrimaryCtxRetain, &c.ctx, dev), "cuDevicePrimaryCtxRetain(%d)", ordinal); err != nil {
		return nil, err
	}
	if err := d.check(C.sb_cuCtxSetCurrent(d.api.cuCtxSetCurrent, c.ctx), "cuCtxSetCurrent(device %d)", ordinal); err != nil {
		releaseErr := d.check(C.sb_cuDevicePrimaryCtxRelease(d.api.cuDevicePrimaryCtxRelease, dev), "cuDevicePrimaryCtxRelease_v2(%d)", ordinal)
		return nil, errors.Join(err, releaseErr)
	}
	return c, nil
}

// Close releases the primary context; the device is reset when the last
// retain is released. The thread's current context is left alone: every
// Context of a device shares the one primary context, so unbinding it here
// would leave another still-open Context (two backends in 'stepbench ab')
// without a current context. A released primary context that stays current
// is harmless: calls fail until the next NewContext binds it again.
func (c *Context) Close() error {
	if c.ctx == nil {
		return nil
	}
	d := c.drv
	err := d.check(C.sb_cuDevicePrimaryCtxRelease(d.api.cuDevicePrimaryCtxRelease, c.dev), "cuDevicePrimaryCtxRelease_v2(%d)", c.ordinal)
	c.ctx = nil
	return err
}
