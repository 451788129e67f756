package ociimage

import (
	"archive/tar"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// writeArchive writes the layout in dir as a tar (the "oci-archive" podman,
// skopeo, `ctr images import` and `docker load` read), in path order with
// fixed times and owners so that the archive, too, is the same for the same
// images. It is written beside and renamed, so a reader never sees half.
func writeArchive(path, dir string, mtime time.Time) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), ".archive-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	tw := tar.NewWriter(f)
	// WalkDir visits in lexical order.
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		return addToArchive(tw, dir, p, d, mtime)
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// addToArchive writes one entry of the layout (a directory, or a file with
// its bytes) under its path relative to dir.
func addToArchive(tw *tar.Writer, dir, p string, d fs.DirEntry, mtime time.Time) error {
	name, err := filepath.Rel(dir, p)
	if err != nil {
		return err
	}
	h := &tar.Header{Name: filepath.ToSlash(name), ModTime: mtime, Format: tar.FormatPAX}
	if d.IsDir() {
		h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		return tw.WriteHeader(h)
	}
	st, err := d.Info()
	if err != nil {
		return err
	}
	h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, st.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	_, err = io.Copy(tw, src)
	return err
}
