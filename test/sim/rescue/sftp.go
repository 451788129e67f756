package rescue

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pkg/sftp"
)

// errDenied is what a refused path gets: SSH_FX_PERMISSION_DENIED.
var errDenied = sftp.ErrSSHFxPermissionDenied

// homeFS serves SFTP requests on the real filesystem, confined to home.
type homeFS struct{ home string }

func (s *Server) sftpHandlers() sftp.Handlers {
	fs := &homeFS{home: s.home}
	return sftp.Handlers{FileGet: fs, FilePut: fs, FileCmd: fs, FileList: fs}
}

// resolve maps a request path to a real path under home, refusing anything
// that leaves it, also through symlinks (of the path or of its parents).
func (fs *homeFS) resolve(p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(fs.home, p)
	}
	p = filepath.Clean(p)
	if !fs.inside(p) {
		return "", errDenied
	}
	// Resolve the deepest existing ancestor; what does not exist yet cannot
	// be a symlink.
	existing, rest := p, ""
	for {
		real, err := filepath.EvalSymlinks(existing)
		if err == nil {
			if !fs.inside(real) {
				return "", errDenied
			}
			return filepath.Join(real, rest), nil
		}
		if !os.IsNotExist(err) {
			return "", err
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return "", errDenied
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
}

func (fs *homeFS) inside(p string) bool {
	return p == fs.home || strings.HasPrefix(p, fs.home+string(filepath.Separator))
}

func (fs *homeFS) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	p, err := fs.resolve(r.Filepath)
	if err != nil {
		return nil, err
	}
	return os.Open(p)
}

func (fs *homeFS) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	return fs.open(r)
}

func (fs *homeFS) OpenFile(r *sftp.Request) (sftp.WriterAtReaderAt, error) {
	return fs.open(r)
}

func (fs *homeFS) open(r *sftp.Request) (*os.File, error) {
	p, err := fs.resolve(r.Filepath)
	if err != nil {
		return nil, err
	}
	pf := r.Pflags()
	var flag int
	switch {
	case pf.Read && pf.Write:
		flag = os.O_RDWR
	case pf.Write:
		flag = os.O_WRONLY
	default:
		flag = os.O_RDONLY
	}
	if pf.Append {
		flag |= os.O_APPEND
	}
	if pf.Creat {
		flag |= os.O_CREATE
	}
	if pf.Trunc {
		flag |= os.O_TRUNC
	}
	if pf.Excl {
		flag |= os.O_EXCL
	}
	mode := os.FileMode(0o644)
	if r.AttrFlags().Permissions {
		mode = r.Attributes().FileMode().Perm()
	}
	return os.OpenFile(p, flag, mode)
}

func (fs *homeFS) Filecmd(r *sftp.Request) error {
	switch r.Method {
	case "Symlink":
		return fs.symlink(r)
	case "Rmdir", "Remove":
		// Remove must not follow a symlink to its target: resolve only the
		// parent directory.
		lp, err := fs.lexical(r.Filepath)
		if err != nil {
			return err
		}
		return os.Remove(lp)
	}
	p, err := fs.resolve(r.Filepath)
	if err != nil {
		return err
	}
	switch r.Method {
	case "Setstat":
		return setstat(p, r.Attributes(), r.AttrFlags())
	case "Rename", "PosixRename":
		return fs.toTarget(p, r.Target, os.Rename)
	case "Mkdir":
		return os.Mkdir(p, 0o755)
	case "Link":
		return fs.toTarget(p, r.Target, os.Link)
	}
	return sftp.ErrSSHFxOpUnsupported
}

// toTarget applies op (rename, link) from p to the target, once the target
// is confined to home.
func (fs *homeFS) toTarget(p, target string, op func(from, to string) error) error {
	t, err := fs.resolve(target)
	if err != nil {
		return err
	}
	return op(p, t)
}

// setstat changes what the request's flags select: permissions, size,
// then times, stopping at the first failure.
func setstat(p string, attrs *sftp.FileStat, flags sftp.FileAttrFlags) error {
	if flags.Permissions {
		if err := os.Chmod(p, attrs.FileMode().Perm()); err != nil {
			return err
		}
	}
	if flags.Size {
		if err := os.Truncate(p, int64(attrs.Size)); err != nil {
			return err
		}
	}
	if flags.Acmodtime {
		return os.Chtimes(p, time.Unix(int64(attrs.Atime), 0), time.Unix(int64(attrs.Mtime), 0))
	}
	return nil
}

// symlink creates r.Target pointing to r.Filepath; both must stay inside home.
func (fs *homeFS) symlink(r *sftp.Request) error {
	link, err := fs.lexical(r.Target)
	if err != nil {
		return err
	}
	target := r.Filepath
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(link), target)
	}
	if _, err := fs.resolve(target); err != nil {
		return err
	}
	return os.Symlink(r.Filepath, link)
}

// lexical confines p to home without resolving its last element.
func (fs *homeFS) lexical(p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(fs.home, p)
	}
	p = filepath.Clean(p)
	dir, err := fs.resolve(filepath.Dir(p))
	if err != nil || !fs.inside(p) {
		return "", errDenied
	}
	return filepath.Join(dir, filepath.Base(p)), nil
}

func (fs *homeFS) PosixRename(r *sftp.Request) error { return fs.Filecmd(r) }

func (fs *homeFS) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	switch r.Method {
	case "List":
		p, err := fs.resolve(r.Filepath)
		if err != nil {
			return nil, err
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		var infos listerAt
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				infos = append(infos, fi)
			}
		}
		return infos, nil
	case "Stat":
		p, err := fs.resolve(r.Filepath)
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		return listerAt{fi}, nil
	case "Readlink":
		lp, err := fs.lexical(r.Filepath)
		if err != nil {
			return nil, err
		}
		target, err := os.Readlink(lp)
		if err != nil {
			return nil, err
		}
		return listerAt{linkInfo(target)}, nil
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

func (fs *homeFS) Lstat(r *sftp.Request) (sftp.ListerAt, error) {
	lp, err := fs.lexical(r.Filepath)
	if err != nil {
		return nil, err
	}
	fi, err := os.Lstat(lp)
	if err != nil {
		return nil, err
	}
	return listerAt{fi}, nil
}

// RealPath makes relative paths resolve against home.
func (fs *homeFS) RealPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(fs.home, p)
	}
	return filepath.Clean(p), nil
}

type listerAt []os.FileInfo

func (l listerAt) ListAt(out []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(out, l[off:])
	if off+int64(n) >= int64(len(l)) {
		return n, io.EOF
	}
	return n, nil
}

// linkInfo carries a readlink result: pkg/sftp takes the target from Name().
type linkInfo string

func (l linkInfo) Name() string       { return string(l) }
func (l linkInfo) Size() int64        { return 0 }
func (l linkInfo) Mode() os.FileMode  { return os.ModeSymlink | 0o777 }
func (l linkInfo) ModTime() time.Time { return time.Time{} }
func (l linkInfo) IsDir() bool        { return false }
func (l linkInfo) Sys() any           { return nil }
