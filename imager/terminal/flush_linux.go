package terminal

import (
	"os"

	"golang.org/x/sys/unix"
)

// discardTypeahead drops what was typed at the terminal before the
// question was shown (TCIFLUSH): a "y" typed ahead, or a paste of the next
// commands, must not answer a question the operator has not read.
func discardTypeahead(f *os.File) {
	_ = unix.IoctlSetInt(int(f.Fd()), unix.TCFLSH, unix.TCIFLUSH)
}
