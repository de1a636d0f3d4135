package store

// CheckDataDir refuses, as every verb would, a dataDir that is a system
// directory or lies on a path other users could change, and makes nothing:
// the installer checks an entry's dataDir before it chains the entry, since
// a refused dataDir fails every ADD, DEL and CHECK of the node.
func CheckDataDir(dataDir string) error {
	s := New(dataDir, "")
	defer s.close()
	_, err := s.prepare(false)
	return err
}
