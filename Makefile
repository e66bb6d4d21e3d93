# claimq: PGXS build
EXTENSION = claimq
MODULE_big = claimq
# The install script of the current version is built from sql/claimq.sql;
# the scripts of earlier versions and the updates are kept as released.
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'$$/\1/p" $(srcdir)/claimq.control)
DATA = $(wildcard sql/claimq--*.sql)
DATA_built = claimq--$(EXTVERSION).sql
OBJS = $(patsubst %.c,%.o,$(wildcard src/*.c))
# CQ_CPPFLAGS=-DUSE_ASSERT_CHECKING turns claimq's own Assert()s on, for
# the test command's run with assertions (a server built without them can
# load such a library: no struct of the headers changes).
PG_CPPFLAGS = -I$(srcdir)/src $(CQ_CPPFLAGS)
# Warnings are errors; the unused parameters are fmgr's calling convention.
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter -Werror

# API tests: pgTAP inside pg_regress.  Sources in test/sql, expected output
# in expected/ (test/expected points there).
REGRESS = $(sort $(patsubst test/sql/%.sql,%,$(wildcard test/sql/*.sql)))
REGRESS_OPTS = --inputdir=test --temp-instance=tmp_check_regress \
	--temp-config=test/claimq.conf

# Races: isolation specs in test/specs.
ISOLATION = $(sort $(patsubst test/specs/%.spec,%,$(wildcard test/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test --temp-instance=tmp_check_iso \
	--temp-config=test/claimq.conf

# Crashes, standbys and the worker: TAP tests in test/t.
PROVE_TESTS = $(wildcard test/t/*.pl)
ifneq ($(PROVE_TESTS),)
TAP_TESTS = 1
endif

EXTRA_CLEAN = tmp_check_regress tmp_check_iso output_iso results \
	regression.diffs regression.out

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Every object depends on the shared header.
$(OBJS): src/claimq.h

claimq--$(EXTVERSION).sql: sql/claimq.sql claimq.control
	cp $< $@
