// Package atomicfile is the installer's way with the files of the CNI bin
// and conf dirs, which other writers (the primary CNI, the runtime, a
// person) share with it: every write a temp file in the same directory,
// fsync, rename and fsync of the directory, so that a reader, or a
// runtime executing the old binary, sees the old file or the new one,
// never part; a write or removal that goes in only if a check made right
// before it passes; reads that refuse a symlink or anything but a regular
// file; the flock(2) on a directory that serialises installers; and the
// sweep of the temp files a killed write leaves. Tests kill the process
// at each point where the disk would differ (Fault).
//
// It decides nothing: which file to write, and over which bytes, is
// package install's. It never follows a symlink and never touches a file
// but the one it is asked to, and its own temp files.
package atomicfile
