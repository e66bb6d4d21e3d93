# claimq: PGXS build
EXTENSION = claimq
MODULE_big = claimq
# The install script of the current version is built from sql/claimq.sql,
# and the update from the release before (PREVIOUS) from its source in
# sql/, both by sql/edition (which puts in the files they include); the
# scripts of earlier versions and their updates are kept as released.
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'$$/\1/p" $(srcdir)/claimq.control)
PREVIOUS = 0.7
UPDATE_SCRIPT = claimq--$(PREVIOUS)--$(EXTVERSION).sql
DATA = $(filter-out sql/$(UPDATE_SCRIPT),$(wildcard sql/claimq--*.sql))
DATA_built = claimq--$(EXTVERSION).sql $(UPDATE_SCRIPT)
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
# CQ_SERVER_OPTS: more pg_regress options for the temporary servers of
# both, e.g. test/run's run beside Citus (test/citus/citus.conf).
REGRESS_OPTS = --inputdir=test --temp-instance=tmp_check_regress \
	--temp-config=test/claimq.conf $(CQ_SERVER_OPTS)

# Races: isolation specs in test/specs, but for those that say in their
# first lines that they concern the portable edition only (test/portable
# runs them).
ISOLATION = $(sort $(patsubst test/specs/%.spec,%,\
	$(shell grep -L 'edition: portable only' $(wildcard test/specs/*.spec))))
ISOLATION_OPTS = --inputdir=test --temp-instance=tmp_check_iso \
	--temp-config=test/claimq.conf $(CQ_SERVER_OPTS)

# Crashes, standbys and the worker: TAP tests in test/t.
PROVE_TESTS = $(wildcard test/t/*.pl)
ifneq ($(PROVE_TESTS),)
TAP_TESTS = 1
endif

EXTRA_CLEAN = tmp_check_regress tmp_check_iso output_iso results \
	regression.diffs regression.out claimq-portable.sql claimq-pgtle.sql \
	claimq-portable--*.sql claimq-pgtle--*.sql output_portable

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Every object depends on the shared header.
$(OBJS): src/claimq.h

# Both editions come from sql/claimq.sql (see sql/edition), with the
# bodies of sql/portable/ in the portable edition and the other files of
# sql/ in every edition.
PORTABLE_BODIES = $(wildcard $(srcdir)/sql/portable/*)
SHARED_BODIES = $(filter-out $(srcdir)/sql/claimq%,$(wildcard $(srcdir)/sql/*.sql))

claimq--$(EXTVERSION).sql: sql/claimq.sql sql/edition src/claimq.h claimq.control $(SHARED_BODIES)
	perl $(srcdir)/sql/edition c $(EXTVERSION) $< >$@.tmp && mv $@.tmp $@

$(UPDATE_SCRIPT): sql/$(UPDATE_SCRIPT) sql/edition src/claimq.h $(SHARED_BODIES)
	perl $(srcdir)/sql/edition c $(EXTVERSION) $< >$@.tmp && mv $@.tmp $@

# The portable edition: claimq-portable.sql, a plain script that a
# database's owner runs with psql, and claimq-pgtle.sql, which registers
# the same edition with pg_tle for CREATE EXTENSION claimq.
.PHONY: portable
portable: claimq-portable.sql claimq-pgtle.sql

claimq-portable.sql: sql/claimq.sql sql/edition src/claimq.h claimq.control $(PORTABLE_BODIES) $(SHARED_BODIES)
	{ printf '%s\n' \
		'-- claimq $(EXTVERSION), the portable edition, as a plain script: run it' \
		'-- as the database'"'"'s owner with psql -f; it creates schema claimq, in' \
		'-- a transaction of its own unless psql'"'"'s variable claimq_in_transaction' \
		'-- is set (then in the caller'"'"'s: see docs/operations.md).' \
		'\set ON_ERROR_STOP on' '\if :{?claimq_in_transaction}' '\else' 'BEGIN;' '\endif' && \
	  perl $(srcdir)/sql/edition script $(EXTVERSION) $< && \
	  printf '%s\n' '\if :{?claimq_in_transaction}' '\else' 'COMMIT;' '\endif'; \
	} >$@.tmp && mv $@.tmp $@

claimq-pgtle.sql: sql/claimq.sql sql/edition src/claimq.h claimq.control $(PORTABLE_BODIES) $(SHARED_BODIES)
	{ printf '%s\n' \
		'-- claimq $(EXTVERSION), the portable edition, for pg_tle: run it as a role' \
		'-- granted pgtle_admin, then CREATE EXTENSION claimq.' \
		'\set ON_ERROR_STOP on' \
		"SELECT pgtle.install_extension('claimq', '$(EXTVERSION)'," \
		"  'leased, fenced work queues (the portable edition)', \$$claimq_pgtle\$$" && \
	  perl $(srcdir)/sql/edition extension $(EXTVERSION) $< && \
	  printf '%s\n' '$$claimq_pgtle$$, schema => '"'"'claimq'"'"');'; } >$@.tmp && mv $@.tmp $@

# The portable edition's update from the release before, built from the C
# edition's update script: a plain script (it checks the version it
# updates), and the update path for pg_tle (then ALTER EXTENSION claimq
# UPDATE TO the new version in each database).
PORTABLE_FROM = $(PREVIOUS)
PORTABLE_UPDATE = claimq-portable--$(PORTABLE_FROM)--$(EXTVERSION).sql \
	claimq-pgtle--$(PORTABLE_FROM)--$(EXTVERSION).sql
portable: $(PORTABLE_UPDATE)

claimq-portable--$(PORTABLE_FROM)--$(EXTVERSION).sql: sql/claimq--$(PORTABLE_FROM)--$(EXTVERSION).sql sql/edition src/claimq.h $(PORTABLE_BODIES) $(SHARED_BODIES)
	{ printf '%s\n' \
		'-- claimq $(PORTABLE_FROM) to $(EXTVERSION), the portable edition, as a plain script:' \
		'-- run it as the database'"'"'s owner with psql -f where the plain script of' \
		'-- $(PORTABLE_FROM) was run; in a transaction of its own unless psql'"'"'s variable' \
		'-- claimq_in_transaction is set.' \
		'\set ON_ERROR_STOP on' '\if :{?claimq_in_transaction}' '\else' 'BEGIN;' '\endif' && \
	  perl $(srcdir)/sql/edition script $(EXTVERSION) $< && \
	  printf '%s\n' '\if :{?claimq_in_transaction}' '\else' 'COMMIT;' '\endif'; \
	} >$@.tmp && mv $@.tmp $@

claimq-pgtle--$(PORTABLE_FROM)--$(EXTVERSION).sql: sql/claimq--$(PORTABLE_FROM)--$(EXTVERSION).sql sql/edition src/claimq.h $(PORTABLE_BODIES) $(SHARED_BODIES)
	{ printf '%s\n' \
		'-- claimq $(PORTABLE_FROM) to $(EXTVERSION), the portable edition, for pg_tle: run it as' \
		'-- a role granted pgtle_admin, then ALTER EXTENSION claimq UPDATE TO '"'"'$(EXTVERSION)'"'"'' \
		'-- in each database that has claimq $(PORTABLE_FROM).  (The default version stays' \
		'-- $(PORTABLE_FROM): pg_tle 1.5.3'"'"'s set_default_version crashes PostgreSQL 18.)' \
		'\set ON_ERROR_STOP on' \
		"SELECT pgtle.install_update_path('claimq', '$(PORTABLE_FROM)', '$(EXTVERSION)', \$$claimq_pgtle\$$" && \
	  perl $(srcdir)/sql/edition extension $(EXTVERSION) $< && \
	  printf '%s\n' '$$claimq_pgtle$$);'; } >$@.tmp && mv $@.tmp $@

# The TAP tests install the portable edition from its plain script, and
# through pg_tle where an installation with pg_tle is given (036).
installcheck: claimq-portable.sql claimq-pgtle.sql $(PORTABLE_UPDATE)
