package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// CABundlePath is where Go (and most TLS stacks) look for the system roots.
const CABundlePath = "/etc/ssl/certs/ca-certificates.crt"

// file is one entry of a layer.
type file struct {
	path     string // absolute in the image
	mode     int64  // permission bits (plus sticky)
	dir      bool
	uid, gid int
	data     []byte
}

// baseFiles is what distroless/static gives a static binary, minus what the
// two binaries never read (tzdata, os-release): users, name service order,
// CA roots, a writable /tmp (em-imager publish stages files there) and the
// non-root user's home.
func baseFiles(caBundle, caCopyright []byte) []file {
	nr := NonRootUID
	files := []file{
		{path: "/etc", mode: 0o755, dir: true},
		{path: "/etc/passwd", mode: 0o644, data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
				fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nr, nr))},
		{path: "/etc/group", mode: 0o644, data: []byte(
			"root:x:0:\nnobody:x:65534:\n" + fmt.Sprintf("nonroot:x:%d:\n", nr))},
		// Go's resolver reads it: hosts first, then DNS (as glibc would).
		{path: "/etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{path: "/etc/ssl", mode: 0o755, dir: true},
		{path: "/etc/ssl/certs", mode: 0o755, dir: true},
		{path: CABundlePath, mode: 0o644, data: caBundle},
		{path: "/home", mode: 0o755, dir: true},
		{path: "/home/nonroot", mode: 0o700, dir: true, uid: nr, gid: nr},
		{path: "/root", mode: 0o700, dir: true},
		{path: "/tmp", mode: 0o1777, dir: true},
	}
	if caCopyright != nil {
		// The certificates are redistributed: ship their licence terms as
		// Debian (and distroless) do.
		files = append(files,
			file{path: "/usr", mode: 0o755, dir: true},
			file{path: "/usr/share", mode: 0o755, dir: true},
			file{path: "/usr/share/doc", mode: 0o755, dir: true},
			file{path: "/usr/share/doc/ca-certificates", mode: 0o755, dir: true},
			file{path: "/usr/share/doc/ca-certificates/copyright", mode: 0o644, data: caCopyright})
	}
	return files
}

// readCABundle concatenates the certificates of Debian's ca-certificates
// package (dir, normally /usr/share/ca-certificates/mozilla) in name order.
// The host's /etc/ssl/certs bundle is not used: it may hold certificates
// added locally (update-ca-certificates), which must not leak into an image.
func readCABundle(dir string) (bundle []byte, count int, err error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.crt"))
	if err != nil {
		return nil, 0, err
	}
	if len(paths) == 0 {
		return nil, 0, fmt.Errorf("no *.crt in %s: install Debian's ca-certificates (make image-deps) or pass the directory holding them", dir)
	}
	slices.Sort(paths)
	var buf bytes.Buffer
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, 0, err
		}
		n, err := countCerts(b)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", p, err)
		}
		count += n
		buf.Write(b)
		if !bytes.HasSuffix(b, []byte("\n")) {
			buf.WriteByte('\n')
		}
	}
	return buf.Bytes(), count, nil
}

// countCerts checks that b is PEM holding only parseable certificates.
func countCerts(b []byte) (int, error) {
	n := 0
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			if len(bytes.TrimSpace(rest)) > 0 || n == 0 {
				return 0, fmt.Errorf("not a PEM certificate file")
			}
			return n, nil
		}
		if blk.Type != "CERTIFICATE" {
			return 0, fmt.Errorf("PEM block %q, want CERTIFICATE", blk.Type)
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return 0, err
		}
		n++
	}
}

// newLayer writes files as a gzipped tar (layerTar) with every timestamp at
// mtime: the same files always give the same digest.
func newLayer(files []file, mtime time.Time) (v1.Layer, error) {
	tarBytes, err := layerTar(files, mtime)
	if err != nil {
		return nil, err
	}
	return gzipLayer(tarBytes)
}

// layerTar writes files as a tar in path order, every timestamp at mtime,
// owned by root unless said otherwise. Parents must be listed before their
// children. The Dockerfiles' build context holds the base layer's tar as
// written here (rootfs.tar), so both ways of building unpack the same files.
func layerTar(files []file, mtime time.Time) ([]byte, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.path, b.path) })
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for _, f := range files {
		h := &tar.Header{
			Name:    strings.TrimPrefix(f.path, "/"),
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.gid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return tarBuf.Bytes(), nil
}

// gzipLayer is the layer of an uncompressed tar.
func gzipLayer(tarBytes []byte) (v1.Layer, error) {
	// Compressed once here (the library would compress again for each
	// digest and write); stdlib gzip writes no name or time in its header.
	var gzBuf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gzBuf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tarBytes); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	compressed := gzBuf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
