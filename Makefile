# Palisade build and test entry points. See README.md.
GO        ?= go
PREFIX    ?= /usr/local
DESTDIR   ?=
BINDIR    := $(DESTDIR)$(PREFIX)/bin
FUZZTIME  ?= 20s
# Test flags. Tests that need root, kernel features, commands or data
# skip (and say why) unless PALISADE_REQUIRE_PRIVILEGED=1, which turns
# those skips into failures.
TESTFLAGS ?= -count=1 -timeout 30m

BINARIES := $(notdir $(wildcard cmd/*))
# Static binaries: no cgo, so the egress proxy can drop capabilities on
# every thread (AllThreadsSyscall needs a cgo-free runtime) and start-up
# loads no shared libraries.
export CGO_ENABLED = 0

.PHONY: all build test bench fuzz generate lint install clean

all: build

# Every binary's --version (pkg/cli.ReadBuildInfo) names the commit it
# was built from. go build's own VCS stamp is switched off: it recognises
# a repository only by a .git directory, so in a linked git worktree (.git
# is a file) it stamps nothing, or the commit of a checkout the tree sits
# in (golang/go#58218). git itself says which commit this tree is and
# whether it has uncommitted changes ("+modified"); outside a git checkout
# the commit is "unknown". OUT is where the binaries go.
OUT      ?= bin
CLIPKG   := github.com/palisade-sandbox/palisade/pkg/cli
INGIT     = $(shell [ "$$(git rev-parse --show-toplevel 2>/dev/null)" = "$(CURDIR)" ] && echo yes)
VCS_REV   = $(if $(INGIT),$(shell git rev-parse HEAD))
VCS_TIME  = $(if $(INGIT),$(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ))
VCS_MOD   = $(if $(INGIT),$(shell [ -z "$$(git status --porcelain)" ] && echo false || echo true))
LDFLAGS   = -X $(CLIPKG).stampRevision=$(VCS_REV) -X $(CLIPKG).stampTime=$(VCS_TIME) -X $(CLIPKG).stampModified=$(VCS_MOD)

# The binaries and their directory are made writable by their owner only
# whatever the umask: sandbox-supervisor refuses a palisade-init that
# group or others could have replaced (a umask of 002 made both 0775).
build:
	@mkdir -p $(OUT)
	$(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $(OUT)/ ./cmd/...
	@chmod go-w $(OUT) $(OUT)/*

# Privileged integration tests run the binaries from ./bin, so build first.
# scripts/testsum runs go test -json and prints what go test prints (ok/FAIL
# per package, the output of failed tests only), then the skipped tests
# grouped by reason; it exits with go test's status.
test: build
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	PALISADE_BIN_DIR=$(CURDIR)/bin $(GO) run ./scripts/testsum -go $(GO) -- $(TESTFLAGS) ./...

bench: build
	PALISADE_BIN_DIR=$(CURDIR)/bin $(GO) test -run '^$$' -bench . -benchmem ./...
	@for s in scripts/bench/*.sh; do [ -x "$$s" ] && echo "== $$s" && "$$s"; done; true

# Every fuzz target runs for FUZZTIME. Seed corpora in testdata/fuzz run as
# ordinary tests in `make test`.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# eBPF objects (bpf/): clang, llvm-strip and libbpf's headers from apt
# when missing (Debian/Ubuntu), then bpf2go as pinned in go.mod.
generate:
	@if ! command -v clang >/dev/null || ! command -v llvm-strip >/dev/null || [ ! -f /usr/include/bpf/bpf_helpers.h ]; then \
	  echo "generate: installing clang llvm libbpf-dev"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang llvm libbpf-dev >/dev/null; \
	fi
	$(GO) generate ./...

# lint fails when gofmt would change a file, when go vet finds something,
# or when `go mod tidy` would change go.mod/go.sum.
lint:
	$(GO) mod tidy -diff
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...

install: build
	install -d $(BINDIR)
	@for b in bin/*; do install -m 0755 "$$b" $(BINDIR)/; done

clean:
	rm -rf bin
