// Package docs_test holds the README, docs/ and the other markdown files
// of the tree to what a reader relies on:
// every relative link leads to a file of the repository and every #anchor
// to a heading of its markdown file, and the README stays short and opens
// with the two commands a new user runs.
package docs_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, from test/docs.
const root = "../.."

func TestEveryRelativeLinkInTheDocsLeadsToAFileAndAnAnchorThatExist(t *testing.T) {
	files := docFiles(t, root)
	if !slices.Contains(files, filepath.Join(root, "README.md")) || len(files) < 10 {
		t.Fatalf("found %d markdown files, README.md and docs/*.md among them?: the walk looked in the wrong place: %v", len(files), files)
	}
	checked := 0
	for _, f := range files {
		problems, n, err := checkLinks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		checked += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d relative links in %d files: the link parser misses them", checked, len(files))
	}
}

func TestTheLinkCheckerFindsAMissingFileAnAnchorAndALinkOutOfTheTree(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/b.md", "# B's `page`: one\n\n## Twice\n\n## Twice\n\n```\n# not a heading\n```\n")
	write("README.md", strings.Join([]string{
		"# A",
		"[ok](docs/b.md) [ok](docs/b.md#bs-page-one) [ok](docs/b.md#twice-1) [ok](#a)",
		"[ok](https://example.com/x.md#nowhere) `[in code](nowhere.md)`",
		"```",
		"[in a fence](nowhere.md)",
		"```",
		"[missing](docs/c.md) [anchor](docs/b.md#nowhere) [fenced](docs/b.md#not-a-heading)",
		"[twice](docs/b.md#twice-2) [out](../outside.md) ![img](docs/b.svg)",
	}, "\n"))
	problems, n, err := checkLinks(dir, filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"docs/c.md", "#nowhere", "#not-a-heading", "#twice-2", "../outside.md", "docs/b.svg"}
	if len(problems) != len(want) || n != 10 {
		t.Fatalf("checked %d links (want 10), found %d problems (want %d):\n%s", n, len(problems), len(want), strings.Join(problems, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(problems[i], w) {
			t.Errorf("problem %d = %q, want one naming %q", i, problems[i], w)
		}
	}
}

func TestTheReadmeIsAtMost250LinesAndOpensWithTheTwoCommands(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if n := strings.Count(text, "\n"); n > 250 {
		t.Errorf("README.md has %d lines: at most 250, the rest goes to docs/", n)
	}
	// The first code block is what a new user runs; .ci/run runs `make test`.
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(text)
	if block == nil || strings.Index(text, "```") != strings.Index(text, "```sh") {
		t.Fatal("README.md does not open with a sh code block")
	}
	for _, cmd := range []string{"make demo", "make test"} {
		if !regexp.MustCompile(`(?m)^` + cmd + `\b`).MatchString(block[1]) {
			t.Errorf("README.md's first code block lacks %q:\n%s", cmd, block[1])
		}
	}
}

// docFiles lists the markdown files under dir: README.md, docs/*.md and
// the READMEs beside the examples and the e2e scripts. Hidden directories
// (.git) and testdata are not documentation.
func docFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != dir && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	// inlineLink is [text](target) or ![alt](target), target without spaces
	// (an optional "title" after it is allowed).
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// refLink is a reference definition: [name]: target.
	refLink  = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]]+\]:\s*(\S+)`)
	codeSpan = regexp.MustCompile("`[^`]*`")
	scheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// checkLinks returns a line per relative link of file that leads nowhere,
// and how many relative links it checked. Links in code (fenced blocks and
// code spans) are text, not links, and are skipped.
func checkLinks(repo, file string) (problems []string, checked int, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, 0, err
	}
	absRepo, err := filepath.Abs(repo)
	if err != nil {
		return nil, 0, err
	}
	rel, _ := filepath.Rel(repo, file)
	for i, line := range proseLines(string(b)) {
		line = codeSpan.ReplaceAllString(line, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		for _, m := range refLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if scheme.MatchString(target) {
				continue
			}
			checked++
			if p := checkTarget(absRepo, file, target); p != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", rel, i+1, target, p))
			}
		}
	}
	return problems, checked, nil
}

// checkTarget says what is wrong with one relative link of file, or "".
func checkTarget(absRepo, file, target string) string {
	path, anchor, _ := strings.Cut(target, "#")
	dest := file
	if path != "" {
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
	}
	abs, err := filepath.Abs(dest)
	if err != nil {
		return err.Error()
	}
	if abs != absRepo && !strings.HasPrefix(abs, absRepo+string(filepath.Separator)) {
		return "leads out of the repository"
	}
	if _, err := os.Stat(abs); err != nil {
		return "no such file or directory"
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(abs, ".md") {
		return "an anchor into a file that is not markdown"
	}
	anchors, err := headingAnchors(abs)
	if err != nil {
		return err.Error()
	}
	if !anchors[anchor] {
		return fmt.Sprintf("no heading with anchor #%s in %s", anchor, filepath.Base(abs))
	}
	return ""
}

// proseLines returns the lines of a markdown text with those of fenced code
// blocks blanked, so that line numbers stay right.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives the headings of a markdown
// file: lowercased, punctuation dropped, spaces made hyphens, and a repeated
// one suffixed -1, -2, ...
func headingAnchors(file string) (map[string]bool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(string(b)) {
		trimmed := strings.TrimLeft(l, "#")
		if len(trimmed) == len(l) || len(l)-len(trimmed) > 6 || !strings.HasPrefix(trimmed, " ") {
			continue
		}
		slug := slugify(strings.TrimSpace(trimmed))
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors, nil
}

func slugify(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
