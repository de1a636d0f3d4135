package atomicfile

import (
	"io/fs"
	"os"
	"syscall"
)

// metaOf takes the mode and owner a rewrite must keep.
func metaOf(fi fs.FileInfo) *Meta {
	m := &Meta{Mode: fi.Mode().Perm(), UID: os.Getuid(), GID: os.Getgid(), MTime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		m.UID, m.GID = int(st.Uid), int(st.Gid)
	}
	return m
}
