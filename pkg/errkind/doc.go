// Package errkind is the one error type that carries a kind: a sentinel
// that errors.Is finds, declared by the package that produces the error,
// while the message stays the one line that names the object and the value.
// The plugin maps kinds to CNI error codes in one table. It also declares
// the few kinds that packages on several floors produce (kinds.go). It owns
// nothing else.
package errkind
