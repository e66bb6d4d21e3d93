# The distribution's metadata agrees with the extension: META.json holds
# what the PGXN meta spec 1.0.0 requires, its version is claimq.control's
# default_version (as PGXN's three-part version), the file it names exists,
# and LICENSE and CHANGELOG.md are there for that version.  No server.
use strict;
use warnings;

use FindBin;
use JSON::PP;
use Test::More;

my $top = "$FindBin::RealBin/../..";

sub slurp
{
	my ($path) = @_;
	open(my $fh, '<', $path) or die "cannot open $path: $!";
	local $/;
	return scalar <$fh>;
}

my $meta = eval { decode_json(slurp("$top/META.json")) };
ok($meta, 'META.json is valid JSON') or diag($@);
$meta //= {};

for my $key (qw(name abstract version maintainer license provides meta-spec))
{
	ok(defined $meta->{$key}, "META.json has $key");
}
is($meta->{name}, 'claimq', 'the distribution is called claimq');
is($meta->{'meta-spec'}{version}, '1.0.0', 'it follows the meta spec 1.0.0');
like($meta->{version} // '', qr/^\d+\.\d+\.\d+$/,
	'its version has the three parts PGXN wants');

my ($default) = slurp("$top/claimq.control")
  =~ /^default_version\s*=\s*'([^']+)'/m;
ok(defined $default, "claimq.control names a default_version");
$default //= '';
my @parts = split /\./, $default;
push @parts, 0 while @parts < 3;
my $semver = join '.', @parts;
is($meta->{version}, $semver,
	"META.json's version is claimq.control's default_version ($default)");

my $ext = $meta->{provides}{claimq} // {};
is($ext->{version}, $semver, 'the extension it provides has that version');
ok(defined $ext->{file} && -f "$top/$ext->{file}",
	'the file it names for the extension exists');
ok(defined $ext->{docfile} && -f "$top/$ext->{docfile}",
	'the documentation file it names exists');

is($meta->{license}, 'postgresql', 'the license is the PostgreSQL license');
like(slurp("$top/LICENSE"), qr/Permission to use, copy, modify, and distribute/,
	'LICENSE holds its text');
like(slurp("$top/CHANGELOG.md"), qr/^## \Q$default\E$/m,
	"CHANGELOG.md has a section for $default");
my ($package) = slurp("$top/debian/changelog") =~ /^claimq \(([^)]+)\)/;
is($package, $semver, "the Debian package's version is $semver");
like(slurp("$top/debian/control"), qr/^Package: postgresql-15-claimq$/m,
	'the Debian package is postgresql-15-claimq');
my ($library) = slurp("$top/src/claimq.h")
  =~ /^#define CQ_SCHEMA_VERSION\s+"([^"]+)"/m;
is($library, $default,
	"the library serves the schema of claimq.control's default_version");
ok(-f "$top/sql/claimq--$default.sql" || glob("$top/sql/claimq--*--$default.sql"),
	"a script installs or updates to $default");

# The file map in claimq.h lists every C file, in the order of the
# layout table in CONTRIBUTING.md.
my @c_files = sort map { m{([^/]+\.c)$} ? $1 : () } glob("$top/src/*.c");
my @readme_order = slurp("$top/CONTRIBUTING.md") =~ /^\| `src\/([a-z_]+\.c)`/mg;
my @header_order = slurp("$top/src/claimq.h") =~ /^ \*\t\t([a-z_]+\.c)\t/mg;
is(join(' ', sort @readme_order), join(' ', @c_files),
	"the layout table of CONTRIBUTING.md names every C file once");
is(join(' ', @header_order), join(' ', @readme_order),
	"claimq.h's file map lists them in that table's order");

done_testing();
