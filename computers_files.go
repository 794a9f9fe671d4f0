// computers_files.go — the filesystem API of machines: the path jail, list/read/write/delete, tar.gz upload and
// download, for every provider.
//
// Entry points: computerService.ReadFile, WriteFile, ListDir, DeletePath (used by the run loop) and the
// /v1/computers/:id/fs* handlers; untarTo and tarTo, the one extractor and the one archive writer
// (the local provider's uploads and downloads, `agentd cp`).
//
// Rules (docs/API.md Files, DESIGN §4): only /work and /tmp are exposed (a relative path is under /work);
// the lexical check comes first, then the path is resolved INSIDE the machine (nearest existing
// ancestor, symlinks followed) and must still be inside; the workspace roots cannot be deleted. An upload
// is checked whole before anything is written: entries escaping the target (`..`, absolute, links
// pointing out, paths through a link), special files, and archives inflating past the upload limit
// (a decompression bomb) are refused and nothing is written. A download is measured inside the machine
// and refused past 256 MB compressed (429 E_QUOTA with details) before any byte is sent.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
)

// machineFS is one provider's file operations on resolved guest paths.
type machineFS interface {
	// resolve returns, for each guest path, the path it really designates (symlinks of the nearest
	// existing ancestor followed), as seen inside the machine.
	resolve(ctx context.Context, paths []string) ([]string, error)
	read(ctx context.Context, p string, w io.Writer) error
	write(ctx context.Context, p string, r io.Reader) error
	list(ctx context.Context, p string) ([]DirEntry, error)
	remove(ctx context.Context, p string, recursive bool) error
	// untar unpacks a checked tar.gz archive under dir; it returns the number of entries.
	untar(ctx context.Context, dir string, archive []byte) (int, error)
	// tar writes a tar.gz of p (entries relative to p's parent) to w; with w nil it only measures it.
	tar(ctx context.Context, p string, w io.Writer) (int64, error)
}

const maxUploadEntries = 100000

func cleanGuest(p string) string { return path.Clean("/" + p) }

func joinGuest(dir, name string) string { return path.Clean(dir + "/" + name) }

// insideWritable reports whether a clean guest path is /work, /tmp or below them.
func insideWritable(p string) bool {
	for _, top := range []string{"/work", "/tmp"} {
		if p == top || strings.HasPrefix(p, top+"/") {
			return true
		}
	}
	return false
}

func isWorkspaceRoot(m *ComputerInfo, p string) bool {
	return p == "/work" || p == "/tmp" || p == "/" || p == cleanGuest(m.Workdir)
}

func errOutside(p string) *apiError {
	return errorf(codeFSDenied, "path is outside the machine's writable area: %s", p).
		withHint("use a path under /work or /tmp (a relative path is taken under /work)")
}

func errSymlinkEscape() *apiError {
	return errorf(codeFSDenied, "path resolves outside the workspace through a symlink").
		withHint("use a path whose symlinks stay inside /work or /tmp")
}

// lexicalJail turns a request path into a clean guest path inside /work or /tmp.
func lexicalJail(raw string) (string, error) {
	if strings.IndexByte(raw, 0) >= 0 || strings.ContainsAny(raw, "\n\r") {
		return "", errorf(codeFSDenied, "path contains a control character").withHint("use a plain path")
	}
	p := raw
	if !strings.HasPrefix(p, "/") {
		p = "/work/" + p
	}
	p = path.Clean(p)
	if !insideWritable(p) {
		return "", errOutside(raw)
	}
	return p, nil
}

// jail checks a path lexically, then resolves it inside the machine. With keepLast the final component
// is not followed (delete removes a link, not its target).
func (c *computerService) jail(ctx context.Context, m *ComputerInfo, fsys machineFS, raw string, keepLast bool) (string, error) {
	p, err := lexicalJail(raw)
	if err != nil {
		return "", err
	}
	target := p
	if keepLast && p != "/work" && p != "/tmp" {
		target = path.Dir(p)
	}
	res, err := fsys.resolve(ctx, []string{target})
	if err != nil {
		return "", err
	}
	r := res[0]
	if !insideWritable(r) {
		return "", errSymlinkEscape()
	}
	if target != p {
		r = joinGuest(r, path.Base(p))
	}
	return r, nil
}

// splitRoot turns a clean guest path /work/a/b into ("/work", "a/b"), so a command can run with a mapped
// cwd on every provider (the local provider maps only cwd, not paths inside commands).
func splitRoot(p string) (root, rel string) {
	for _, r := range []string{"/work", "/tmp"} {
		if p == r {
			return r, "."
		}
		if strings.HasPrefix(p, r+"/") {
			return r, strings.TrimPrefix(p, r+"/")
		}
	}
	return "/work", p
}

// Resolve puts a path through the jail of machine id: the guest path it really designates, inside
// /work or /tmp. Tools that run a command on a path (search, move) resolve it first, so a symlink in the
// workspace cannot point the command outside.
func (c *computerService) Resolve(ctx context.Context, id, raw string, keepLast bool) (string, error) {
	_, _, rp, err := c.jailed(ctx, id, raw, keepLast)
	return rp, err
}

// jailed is the preamble of every file operation: the live machine, its files, and raw through the jail.
func (c *computerService) jailed(ctx context.Context, id, raw string, keepLast bool) (*ComputerInfo, machineFS, string, error) {
	m, fsys, err := c.fsFor(ctx, id)
	if err != nil {
		return nil, nil, "", err
	}
	rp, err := c.jail(ctx, m, fsys, raw, keepLast)
	return m, fsys, rp, err
}

func (c *computerService) fsFor(ctx context.Context, id string) (*ComputerInfo, machineFS, error) {
	m, p, err := c.getLive(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	c.touch(m.ID)
	return m, p.fs(m), nil
}

// touch records activity without an exec in flight.
func (c *computerService) touch(id string) {
	rt := c.runtime(id)
	c.mu.Lock()
	rt.lastUsed = c.now()
	c.mu.Unlock()
}

// ReadFile, WriteFile, ListDir and DeletePath go through the path jail of DESIGN §4.
func (c *computerService) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	var buf bytes.Buffer
	if err := c.readTo(ctx, id, path, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (c *computerService) readTo(ctx context.Context, id, p string, w io.Writer) error {
	_, fsys, rp, err := c.jailed(ctx, id, p, false)
	if err != nil {
		return err
	}
	lw := &limitWriter{w: w, left: c.readLimit}
	err = fsys.read(ctx, rp, lw)
	if lw.over {
		return errorf(codeQuota, "%s is larger than %d bytes", rp, c.readLimit).
			withHint("use the download endpoint for large files").withDetail("limit", c.readLimit)
	}
	return err
}

// limitWriter fails once more than left bytes were written.
type limitWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		l.over = true
		return 0, errors.New("read limit exceeded")
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
}

func (c *computerService) WriteFile(ctx context.Context, id, path string, data []byte) error {
	_, fsys, rp, err := c.jailed(ctx, id, path, false)
	if err != nil {
		return err
	}
	if rp == "/work" || rp == "/tmp" {
		return errorf(codeFSDenied, "cannot write over the workspace root %s", rp).withHint("name a file under it")
	}
	return fsys.write(ctx, rp, bytes.NewReader(data))
}

func (c *computerService) ListDir(ctx context.Context, id, path string) ([]DirEntry, error) {
	_, fsys, rp, err := c.jailed(ctx, id, path, false)
	if err != nil {
		return nil, err
	}
	ents, err := fsys.list(ctx, rp)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(ents, func(a, b DirEntry) int {
		if (a.Type == "dir") != (b.Type == "dir") {
			if a.Type == "dir" {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ents, nil
}

func (c *computerService) DeletePath(ctx context.Context, id, path string, recursive bool) error {
	m, fsys, rp, err := c.jailed(ctx, id, path, true)
	if err != nil {
		return err
	}
	if lp, _ := lexicalJail(path); isWorkspaceRoot(m, lp) || isWorkspaceRoot(m, rp) {
		return errorf(codeFSDenied, "refusing to delete the workspace root").withHint("delete the entries inside it instead")
	}
	return fsys.remove(ctx, rp, recursive)
}

// ---- upload ----

// checkedArchive is an upload that passed every check.
type checkedArchive struct {
	names   []string // cleaned relative entry names
	hard    []string // cleaned hard link targets, relative to the target directory
	entries int
}

func errArchive(format string, args ...any) *apiError {
	return errorf(codeFSDenied, format, args...).withHint("nothing was written; fix the archive and upload again")
}

// checkArchive reads the whole tar.gz without writing anything: it refuses escaping entries, special
// files, paths through links, and stops inflating at limit bytes (a decompression bomb).
func checkArchive(archive []byte, limit int64) (*checkedArchive, error) {
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return nil, errorf(codeSpecInvalid, "the upload body is not a gzip archive: %v", err).
			withHint("send a tar.gz archive as the raw body (tar -czf - DIR | curl --data-binary @- ...)")
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	var total int64
	links := map[string]bool{}
	symlinks := map[string]string{} // the archive's own symlinks so far: name → target
	out := &checkedArchive{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errorf(codeSpecInvalid, "the upload body is not a valid tar.gz archive: %v", err).
				withHint("send a tar.gz archive as the raw body")
		}
		out.entries++
		if out.entries > maxUploadEntries {
			return nil, errorf(codeQuota, "the archive has more than %d entries", maxUploadEntries).
				withHint("split the upload").withDetail("limit", maxUploadEntries)
		}
		name := hdr.Name
		if strings.HasPrefix(name, "/") || strings.HasPrefix(name, "\\") {
			return nil, errArchive("archive entry %q is an absolute path", name)
		}
		if strings.ContainsAny(name, "\x00\n\r") {
			return nil, errArchive("archive entry %q contains a control character", name)
		}
		clean := path.Clean(name)
		if clean == ".." || strings.HasPrefix(clean, "../") {
			return nil, errArchive("archive entry %q escapes the target directory", name)
		}
		for dir := path.Dir(clean); dir != "." && dir != "/"; dir = path.Dir(dir) {
			if links[dir] {
				return nil, errArchive("archive entry %q goes through the link %q", name, dir)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeGNULongName, tar.TypeXHeader, tar.TypeXGlobalHeader:
		case tar.TypeSymlink, tar.TypeLink:
			t := hdr.Linkname
			if strings.HasPrefix(t, "/") {
				return nil, errArchive("archive entry %q links to the absolute path %q", name, t)
			}
			base := path.Dir(clean)
			if hdr.Typeflag == tar.TypeLink {
				base = "." // hard link names are relative to the archive root
			}
			if j := path.Clean(base + "/" + t); j == ".." || strings.HasPrefix(j, "../") {
				return nil, errArchive("archive entry %q links outside the target (%q)", name, t)
			}
			// Lexically inside is not enough: through the archive's earlier links (`l1 -> .`,
			// `l2 -> l1/..`) a target can climb one level per link. Resolve it as the kernel would.
			if _, ok := resolveInArchive(symlinks, base+"/"+t, 0); !ok {
				return nil, errArchive("archive entry %q links outside the target through the archive's own links (%q)", name, t)
			}
			links[clean] = true
			if hdr.Typeflag == tar.TypeSymlink {
				symlinks[clean] = t
			}
			if hdr.Typeflag == tar.TypeLink {
				// The unpacker opens the target through the links made so far: one of the archive's own
				// links could lead it to a link planted in the machine, past the resolve in Upload.
				for dir := path.Dir(path.Clean(t)); dir != "." && dir != "/"; dir = path.Dir(dir) {
					if links[dir] {
						return nil, errArchive("archive entry %q hard-links through the link %q", name, dir)
					}
				}
				out.hard = append(out.hard, path.Clean(t))
			}
		default:
			return nil, errArchive("archive entry %q is a special file (type %q)", name, string(hdr.Typeflag))
		}
		n, err := io.Copy(io.Discard, io.LimitReader(tr, limit-total+1))
		total += n
		if total > limit {
			return nil, errorf(codeQuota, "the archive inflates past %d bytes; refused as a possible decompression bomb", limit).
				withHint("nothing was written; upload smaller archives").withDetail("limit", limit).withDetail("bytes", total)
		}
		if err != nil {
			return nil, errorf(codeSpecInvalid, "the upload body is not a valid tar.gz archive: %v", err).withHint("send a tar.gz archive")
		}
		if clean != "." {
			out.names = append(out.names, clean)
		}
	}
	return out, nil
}

// resolveInArchive resolves p (relative to the upload directory) component by component, following the
// archive's own symlinks; ok is false when it climbs above the directory, loops, or meets an absolute
// link.
func resolveInArchive(symlinks map[string]string, p string, depth int) (string, bool) {
	if depth > 40 {
		return "", false
	}
	cur := "."
	for _, part := range strings.Split(p, "/") {
		switch part {
		case "", ".":
			continue
		case "..":
			if cur == "." {
				return "", false
			}
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, part)
		t, isLink := symlinks[next]
		if !isLink {
			cur = next
			continue
		}
		if strings.HasPrefix(t, "/") {
			return "", false
		}
		r, ok := resolveInArchive(symlinks, cur+"/"+t, depth+1)
		if !ok {
			return "", false
		}
		cur = r
	}
	return cur, true
}

// Upload unpacks a tar.gz under dir inside the machine, after every check passed.
func (c *computerService) Upload(ctx context.Context, id, dir string, archive []byte) (map[string]any, error) {
	m, fsys, rd, err := c.jailed(ctx, id, dir, false)
	if err != nil {
		return nil, err
	}
	ca, err := checkArchive(archive, c.uploadLimit)
	if err != nil {
		return nil, err
	}
	// Paths already in the machine (a link planted earlier) must not redirect entries out of the target.
	if len(ca.names) > 0 {
		paths := make([]string, len(ca.names))
		for i, n := range ca.names {
			paths[i] = joinGuest(rd, n)
		}
		// A hard link's target is opened by the unpacker through the machine's links: resolved in full,
		// it must stay inside too, or the new name would share an inode outside the jail.
		check := parentsOf(paths)
		for _, h := range ca.hard {
			check = append(check, joinGuest(rd, h))
		}
		res, err := fsys.resolve(ctx, check)
		if err != nil {
			return nil, err
		}
		for _, r := range res {
			if r != rd && !strings.HasPrefix(r, rd+"/") {
				return nil, errArchive("an archive entry would be written through a link leading outside %s", rd)
			}
		}
	}
	if _, err := fsys.untar(ctx, rd, archive); err != nil {
		return nil, err
	}
	n := ca.entries
	out := map[string]any{"path": rd, "bytes": len(archive), "entries": n}
	c.hub.publish("computers", "uploaded", map[string]any{"computerId": m.ID, "path": rd, "bytes": len(archive), "entries": n})
	return out, nil
}

// parentsOf lists the distinct parent directories of paths (the entries themselves may not exist yet).
func parentsOf(paths []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range paths {
		d := path.Dir(p)
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// untarTo unpacks a tar.gz under root: the one extractor, of the server (the local provider's uploads,
// after checkArchive passed) and of the CLI (`agentd cp` downloads). Nothing is written outside root:
// every directory, file and link is made through the os.Root (which refuses to follow a link out of it,
// including one swapped in meanwhile); absolute names and `..` are refused; a symlink's target must be
// relative and resolve inside root through the archive's own earlier links (l1 -> ., l2 -> l1/.. climb
// one level each), and once made no link may lead out through a link already there; devices and fifos
// are not recreated. rename (nil: none) maps each entry's and hard link target's cleaned name.
func untarTo(root *os.Root, r io.Reader, rename func(string) string) (int, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return 0, fmt.Errorf("not a gzip archive: %v", err)
	}
	tr := tar.NewReader(zr)
	symlinks := map[string]string{} // the archive's symlinks made so far: name -> target
	inside := func(name string) (string, error) {
		name = path.Clean(name)
		if rename != nil {
			name = rename(name)
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return "", fmt.Errorf("refusing archive entry %q outside the destination", name)
		}
		return name, nil
	}
	n := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("reading the archive: %v", err)
		}
		name, err := inside(h.Name)
		if err != nil {
			return n, err
		}
		if name == "." && h.Typeflag != tar.TypeDir {
			return n, fmt.Errorf("refusing archive entry %q: not a file name", h.Name)
		}
		parent, mode := path.Dir(name), os.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, mode|0o700)
		case tar.TypeReg:
			if err = root.MkdirAll(parent, 0o755); err == nil {
				var f *os.File
				root.Remove(name)
				if f, err = root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, mode|0o600); err == nil {
					_, err = io.Copy(f, tr)
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
			}
		case tar.TypeSymlink:
			if path.IsAbs(h.Linkname) {
				return n, fmt.Errorf("refusing link %q -> %q: an absolute target", h.Name, h.Linkname)
			}
			if _, ok := resolveInArchive(symlinks, parent+"/"+h.Linkname, 0); !ok {
				return n, fmt.Errorf("refusing link %q -> %q: it points outside the destination", h.Name, h.Linkname)
			}
			if err = root.MkdirAll(parent, 0o755); err == nil {
				root.Remove(name)
				if err = root.Symlink(h.Linkname, name); err == nil {
					symlinks[name] = h.Linkname
					err = leadsInside(root, name, h)
				}
			}
		case tar.TypeLink:
			var target string
			if target, err = inside(h.Linkname); err != nil {
				return n, err
			}
			if err = root.MkdirAll(parent, 0o755); err == nil {
				root.Remove(name)
				if err = root.Link(target, name); err == nil {
					err = leadsInside(root, name, h)
				}
			}
		default:
			continue
		}
		if err != nil {
			return n, fmt.Errorf("unpacking %s: %w", name, err)
		}
		n++
	}
}

// tarTo writes name (a file or a directory of fsys; links stored as links, never followed) to w as a
// tar.gz whose top entry is called top, owner names left out: the one archive writer, of the local
// provider's downloads (fsys an os.Root) and of `agentd cp` uploads.
func tarTo(ctx context.Context, w io.Writer, fsys fs.FS, name, top string) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	add := func(p string, info fs.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			var err error
			if link, err = fs.ReadLink(fsys, p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel := p // the path under name
		if name != "." {
			rel = strings.TrimPrefix(p, name)
		}
		h.Name, h.Uname, h.Gname = path.Join(top, rel), "", ""
		if info.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil || !info.Mode().IsRegular() {
			return err
		}
		f, err := fsys.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	}
	info, err := fs.Lstat(fsys, name)
	if err == nil && info.IsDir() {
		err = fs.WalkDir(fsys, name, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			return add(p, info)
		})
	} else if err == nil {
		err = add(name, info)
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	return err
}

// leadsInside checks a link just made: followed through the links already in the destination, it must
// stay inside it (a target that does not exist yet is fine); else the link is removed and refused.
func leadsInside(root *os.Root, name string, h *tar.Header) error {
	_, err := root.Stat(name)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	root.Remove(name)
	return fmt.Errorf("refusing link %q -> %q: it leads outside the destination (%v)", h.Name, h.Linkname, err)
}

// ---- download ----

// Download streams a tar.gz of p. The size is measured inside the machine first; past the limit the
// answer is 429 E_QUOTA before any byte is sent.
func (c *computerService) downloadCheck(ctx context.Context, id, p string) (*ComputerInfo, machineFS, string, error) {
	m, fsys, rp, err := c.jailed(ctx, id, p, false)
	if err != nil {
		return nil, nil, "", err
	}
	size, err := fsys.tar(ctx, rp, nil)
	if err != nil {
		return nil, nil, "", err
	}
	if size > c.downloadLimit {
		return nil, nil, "", errorf(codeQuota, "the archive of %s is %d bytes compressed, over the %d byte limit", rp, size, c.downloadLimit).
			withHint("download a smaller directory").withDetail("bytes", size).withDetail("limit", c.downloadLimit)
	}
	return m, fsys, rp, nil
}

// ---- HTTP ----

func pathParam(r *http.Request) (string, error) {
	q := r.URL.Query()
	if !q.Has("path") || q.Get("path") == "" {
		return "", errorf(codeSpecInvalid, "query parameter path is required").withHint("add ?path=/work/...")
	}
	return q.Get("path"), nil
}

func (s *server) handleListDir(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	ents, err := s.computers.ListDir(r.Context(), r.PathValue("id"), p)
	return reply(w, http.StatusOK, map[string]any{"entries": ents}, err)
}

// handleReadFile streams the file: the first readHold bytes are held so a small file (or one that fails
// early) is still answered whole, with its length or a clean envelope; past that the size is checked
// against the read limit once (429 before any byte is sent) and the rest flows through as it is read, so
// a request never holds more than readHold bytes. A failure after bytes went out aborts the connection:
// the client sees a truncated body, never a 200 that looks complete.
func (s *server) handleReadFile(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	rs := &readStream{w: w, hold: readHold, large: func() error { return s.computers.checkReadSize(r.Context(), id, p) }}
	err = s.computers.readTo(r.Context(), id, p, rs)
	if rs.err != nil {
		err = rs.err
	}
	switch {
	case err != nil && !rs.started:
		return err
	case err != nil:
		panic(http.ErrAbortHandler)
	case !rs.started:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(rs.buf.Len()))
		w.WriteHeader(http.StatusOK)
		w.Write(rs.buf.Bytes())
	}
	return nil
}

// readHold is what a file read holds in memory before it starts streaming.
const readHold = 1 << 20

// readStream holds the first hold bytes of a read, then streams.
type readStream struct {
	w       http.ResponseWriter
	hold    int
	large   func() error // called once when the read passes hold bytes; an error ends it before any byte is sent
	buf     bytes.Buffer
	started bool
	err     error
}

func (rs *readStream) Write(p []byte) (int, error) {
	if rs.started {
		return rs.w.Write(p)
	}
	rs.buf.Write(p)
	if rs.buf.Len() <= rs.hold {
		return len(p), nil
	}
	if rs.err = rs.large(); rs.err != nil {
		return 0, rs.err
	}
	rs.started = true
	rs.w.Header().Set("Content-Type", "application/octet-stream")
	rs.w.WriteHeader(http.StatusOK)
	_, err := rs.w.Write(rs.buf.Bytes())
	rs.buf = bytes.Buffer{}
	return len(p), err
}

// checkReadSize refuses, before a large read is streamed, a file past the read limit.
func (c *computerService) checkReadSize(ctx context.Context, id, p string) error {
	_, fsys, rp, err := c.jailed(ctx, id, p, false)
	if err != nil {
		return err
	}
	ents, err := fsys.list(ctx, rp)
	if err != nil {
		return err
	}
	if len(ents) == 1 && ents[0].Size > c.readLimit {
		return errorf(codeQuota, "%s is larger than %d bytes", rp, c.readLimit).
			withHint("use the download endpoint for large files").withDetail("limit", c.readLimit)
	}
	return nil
}

func (s *server) handleWriteFile(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	return noContent(w, s.computers.WriteFile(r.Context(), r.PathValue("id"), p, body))
}

func (s *server) handleDeleteFile(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	recursive := false
	if v := r.URL.Query().Get("recursive"); v != "" {
		if recursive, err = strconv.ParseBool(v); err != nil {
			return errorf(codeSpecInvalid, "recursive: expected true or false, received %q", v).withHint("use recursive=true")
		}
	}
	return noContent(w, s.computers.DeletePath(r.Context(), r.PathValue("id"), p, recursive))
}

func (s *server) handleUpload(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	out, err := s.computers.Upload(r.Context(), r.PathValue("id"), p, body)
	return reply(w, http.StatusOK, out, err)
}

func (s *server) handleDownload(w http.ResponseWriter, r *http.Request) error {
	p, err := pathParam(r)
	if err != nil {
		return err
	}
	_, fsys, rp, err := s.computers.downloadCheck(r.Context(), r.PathValue("id"), p)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", path.Base(rp)+".tar.gz"))
	w.WriteHeader(http.StatusOK)
	if _, err := fsys.tar(r.Context(), rp, w); err != nil {
		// Headers are gone; the truncated stream is the only signal left. Log it.
		s.log.Warn("computers: download interrupted", "path", rp, "err", err)
	}
	return nil
}
