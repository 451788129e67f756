package hwinfo

import (
	"net"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

const ethtoolGPermAddr = 0x00000020

type permAddrReq struct {
	cmd  uint32
	size uint32
	data [32]byte
}

type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte
}

// ethtoolPermAddr returns the permanent hardware address the driver reports
// (SIOCETHTOOL/ETHTOOL_GPERMADDR), "" when the driver does not say.
func ethtoolPermAddr(name string) string {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	pa := &permAddrReq{cmd: ethtoolGPermAddr, size: 32} // heap: the kernel writes through data
	var ifr ifreqData
	copy(ifr.name[:], name)
	ifr.data = uintptr(unsafe.Pointer(pa))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(pa)
	if errno != 0 || pa.size == 0 || pa.size > 32 {
		return ""
	}
	return normalizeMAC(net.HardwareAddr(pa.data[:pa.size]).String())
}
