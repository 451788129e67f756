package diskwrite

import "unsafe"

// uintptrOf is the address of a buffer's first byte, for alignment checks.
func uintptrOf(b []byte) uintptr {
	if cap(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
