// Package detach starts this binary's background children: the
// announcer of later rounds (package announce), the conntrack clean-up
// (the plugin's forget child) and a dataDir's sink (package sink).
//
// Each is started the same way, and each way it could differ is a fault
// a runtime sees: a session of its own, so the runtime's signals to the
// plugin's process group miss it; /dev/null on stdin, stdout and stderr,
// because the runtime reads the plugin's stdout to EOF and an inherited
// one would hold the call until the child exits; "/" as its working
// directory, so that a child that outlives the call (a sink waits 10 s
// idle) keeps no directory of the runtime's busy; and nobody waits for
// it: once the plugin exits, init reaps it.
//
// It owns the starting only: what a child does, and which descriptors
// it is handed, are its package's.
package detach
