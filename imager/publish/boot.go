package publish

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/kernelargs"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/manifest"
)

// headBytes of the raw image hold the MBR and the GPT (for 512- and
// 4096-byte sectors alike).
const headBytes = 1 << 20

// espCapture keeps, in a sparse file, what reading the kernel arguments
// needs from the raw stream, which publish sees only once: the first MiB
// (MBR, GPT) and the EFI system partition, at their offsets. Runs of zeros
// stay holes, so a mostly empty 1 GiB ESP costs what its files hold.
type espCapture struct {
	f          *os.File
	sectorSize int
	off        int64
	end        int64 // -1 until the GPT is parsed; then the end of the ESP (0: none)
	zeros      []byte
}

func newESPCapture(path string, sectorSize int) (*espCapture, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &espCapture{f: f, sectorSize: sectorSize, end: -1, zeros: make([]byte, 64<<10)}, nil
}

func (c *espCapture) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		limit := c.end
		if c.end < 0 {
			limit = headBytes
		}
		if c.off >= limit {
			if c.end < 0 {
				c.parse()
				continue
			}
			c.off += int64(len(p))
			break
		}
		k := int(min(int64(len(p)), limit-c.off))
		if err := c.put(p[:k]); err != nil {
			return 0, err
		}
		c.off += int64(k)
		p = p[k:]
	}
	return n, nil
}

func (c *espCapture) put(p []byte) error {
	for i := 0; i < len(p); i += len(c.zeros) {
		chunk := p[i:min(i+len(c.zeros), len(p))]
		if bytes.Equal(chunk, c.zeros[:len(chunk)]) {
			continue
		}
		if _, err := c.f.WriteAt(chunk, c.off+int64(i)); err != nil {
			return fmt.Errorf("keeping the EFI partition to read the kernel arguments: %w", err)
		}
	}
	return nil
}

// parse finds the ESP in the captured GPT; without one nothing more is kept.
func (c *espCapture) parse() {
	c.end = 0
	t, err := gpt.Read(file.New(c.f, true), c.sectorSize, c.sectorSize)
	if err != nil {
		return
	}
	for _, p := range t.Partitions {
		if p.Type == gpt.EFISystemPartition {
			c.end = int64(p.End+1) * int64(c.sectorSize)
			return
		}
	}
}

// finish sizes the file to what was captured and reads the command line.
func (c *espCapture) finish() (kernelargs.Found, error) {
	if c.end < 0 {
		c.parse() // an image smaller than a MiB
	}
	if err := c.f.Truncate(max(c.end, min(c.off, headBytes))); err != nil {
		return kernelargs.Found{}, err
	}
	path := c.f.Name()
	if err := c.f.Close(); err != nil {
		return kernelargs.Found{}, err
	}
	defer os.Remove(path)
	return kernelargs.FromDisk(path, c.sectorSize)
}

func (c *espCapture) abort() {
	c.f.Close()
	os.Remove(c.f.Name())
}

// bootOf decides what the manifest says about the image's boot: the
// command line read from the image, checked against --kernel-args when both
// exist; --kernel-args alone when the image's cannot be read; else unknown.
// An image that does not (or may not) read its config from the disk is
// refused unless maintenanceAPI: under the default configDelivery: Disk its
// NodeClass would never be Ready.
func bootOf(found kernelargs.Found, readErr error, flag string, maintenanceAPI bool, log *slog.Logger) (*manifest.Boot, error) {
	var b *manifest.Boot
	switch {
	case readErr == nil:
		if flag != "" && !reflect.DeepEqual(kernelargs.Parse(flag), kernelargs.Parse(found.Cmdline)) {
			return nil, &Error{Code: CodeInvalidArgument, Err: fmt.Errorf("--kernel-args %q differ from the image's kernel arguments %q (%s)", flag, found.Cmdline, found.Source)}
		}
		b = &manifest.Boot{KernelArgs: found.Cmdline, Source: manifest.BootSourceImage + found.Source}
	case flag != "":
		log.Warn("cannot read the image's kernel arguments; recording --kernel-args as given", "reason", readErr)
		b = &manifest.Boot{KernelArgs: flag, Source: manifest.BootSourceFlag}
	default:
		if !errors.Is(readErr, kernelargs.ErrNotFound) {
			log.Warn("reading the image's kernel arguments failed", "error", readErr)
		}
		const unknown = "the image's kernel arguments are unknown (no unified kernel image in its EFI partition): pass --kernel-args"
		if !maintenanceAPI {
			return nil, &Error{Code: CodeInvalidArgument, Err: errors.New(unknown + ", or --maintenance-api if its NodeClasses use configDelivery: MaintenanceAPI")}
		}
		log.Warn(unknown + "; the manifest flags the image as not reading its config from the disk")
		return &manifest.Boot{Source: manifest.BootSourceUnknown}, nil
	}
	b.MetalISO = kernelargs.MetalISO(b.KernelArgs)
	if !b.MetalISO {
		lacks := "the image's kernel arguments lack " + kernelargs.ConfigParam + "=" + kernelargs.ConfigMetalISO +
			": its nodes can only get their config over the Talos maintenance API (configDelivery: MaintenanceAPI)"
		if !maintenanceAPI {
			return nil, &Error{Code: CodeInvalidArgument, Err: fmt.Errorf("%s; publish an image of `em-imager schematic`'s schematic (docs/install.md), or pass --maintenance-api if its NodeClasses use MaintenanceAPI (kernel arguments %q)", lacks, b.KernelArgs)}
		}
		log.Warn(lacks, "kernelArgs", b.KernelArgs)
	}
	return b, nil
}
