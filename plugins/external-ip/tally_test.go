package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/tally"
)

func TestTheTallyGoesToTheConfigsDataDirEvenWhenTheConfigIsRefused(t *testing.T) {
	for _, tc := range []struct{ stdin, want string }{
		{`{"name":"pods"}`, config.DefaultDataDir},
		{`{"dataDir":"/run/eip/"}`, "/run/eip"},
		{`{"DATADIR":"/run/eip"}`, "/run/eip"},
		{`{"data\u0044ir":"/run/eip"}`, "/run/eip"},
		{`{"dataDir":"relative"}`, config.DefaultDataDir},
		{`not json, dataDir`, config.DefaultDataDir},
		{`{"device":"d0","dataDir":"/run/eip","traffic":"none"}`, "/run/eip"},
	} {
		if got := dataDirOf([]byte(tc.stdin)); got != tc.want {
			t.Errorf("%s: dataDir %q, want %q", tc.stdin, got, tc.want)
		}
	}
}

func TestEveryVerbIsCountedWithItsCode(t *testing.T) {
	dir := t.TempDir()
	f := tally.NewFolder(dir)
	defer f.Close()
	f.Fold()
	args := &skel.CmdArgs{StdinData: []byte(`{"dataDir":"` + dir + `"}`)}
	fail := func(code uint) func(*skel.CmdArgs) error {
		return func(*skel.CmdArgs) error { return types.NewError(code, "x", "") }
	}
	counted("ADD", func(*skel.CmdArgs) error { return nil })(args)
	counted("ADD", fail(7))(args)
	counted("DEL", func(*skel.CmdArgs) error { return errors.New("not a CNI error") })(args)
	got, err := f.Fold()
	if err != nil {
		t.Fatal(err)
	}
	want := map[tally.Key]uint64{{Verb: "ADD", Code: 0}: 1, {Verb: "ADD", Code: 7}: 1, {Verb: "DEL", Code: types.ErrInternal}: 1}
	if len(got) != len(want) {
		t.Fatalf("counted %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%v counted %d times, want %d", k, got[k], n)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, tally.FileName)); err != nil {
		t.Error(err)
	}
}
