package errkind

import (
	"errors"
	"io/fs"
	"testing"
)

var errTest = errors.New("test kind")

func TestErrorfKeepsKindAndCauseButNotTheKindsText(t *testing.T) {
	err := Errorf(errTest, "reading %s: %w", "/x", fs.ErrNotExist)
	if got, want := err.Error(), "reading /x: file does not exist"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if !errors.Is(err, errTest) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%v lost its kind or its cause", err)
	}
}

func TestPrefixKeepsTheKindAndLeavesOtherErrorsAlone(t *testing.T) {
	err := Prefix("192.0.2.1", Errorf(errTest, "refused"))
	if err.Error() != "192.0.2.1: refused" || !errors.Is(err, errTest) {
		t.Errorf("Prefix gave %q (kind kept: %v)", err, errors.Is(err, errTest))
	}
	plain := errors.New("plain")
	if Prefix("x", plain) != plain || Prefix("x", nil) != nil {
		t.Error("Prefix changed an error without a kind, or nil")
	}
}
