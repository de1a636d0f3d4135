package tally

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// FileName is the file in dataDir that the plugin appends to.
const FileName = "cni-requests"

// Record appends "verb code" to dataDir/cni-requests when the file exists.
// It reports nothing: a count must never fail or slow the call it counts.
// O_NOFOLLOW refuses a symlink planted in place of the file; O_NONBLOCK
// keeps a FIFO with no reader from blocking the plugin; no O_CREAT, so the
// file exists only while a Folder wants the counts.
func Record(dataDir, verb string, code uint) {
	fd, err := unix.Open(dataDir+"/"+FileName, unix.O_WRONLY|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		// One write of a few bytes: O_APPEND makes it land whole at the end,
		// whoever else appends at the same time.
		unix.Write(fd, line(verb, code))
	}
	unix.Close(fd)
}

// line is one record, "ADD 0\n".
func line(verb string, code uint) []byte {
	b := make([]byte, 0, len(verb)+8)
	b = append(b, verb...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(code), 10)
	return append(b, '\n')
}
