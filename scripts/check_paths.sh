#!/bin/sh
# check_paths.sh — every repository file that a comment in src/, include/,
# tools/ or tests/ names must exist, so comments cannot keep pointing at
# files that were moved or never written.
#
#   scripts/check_paths.sh [REPO_ROOT]      (exit 1 and a list if any is missing)
#
# A name counts when it ends in a source or document extension (.c .h .cu
# .cuh .md .cmake .py .sh .proto .txt).  With a slash it must exist relative
# to the repository root, src/, include/, or the commenting file's folder or one
# above it (src/ops/x/a.c may name "y/b.c" for src/ops/y/b.c); without one,
# some file of that name must exist in the repository.  URLs, absolute
# paths, paths that leave the repository (../), protobuf-c's generated
# *.pb-c.* files and upper-case placeholders (FILE.c) are not checked.  Comments are C/C++ comments in
# .c/.h/.cu/.cuh files and '#' comments in .cmake/.py/.sh/CMakeLists.txt.
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
exec perl -e '
use strict; use warnings;
my @files = split /\n/, `find src include tools tests -type f \\( -name "*.[ch]" -o -name "*.cu" -o -name "*.cuh" -o -name "*.cmake" -o -name "*.py" -o -name "*.sh" -o -name CMakeLists.txt \\) -not -path "tests/fixtures/*" | sort`;
my %base;
for (split /\n/, `find . -type f -not -path "./.git/*" -not -path "./build*"`) { m{([^/]+)$} and $base{$1} = 1; }
my $ext = qr/\.(?:c|h|cu|cuh|md|cmake|py|sh|proto|txt)\b/;
my $bad = 0;
for my $f (@files) {
    open my $fh, "<", $f or die "$f: $!";
    local $/; my $text = <$fh>; close $fh;
    my @comments;
    if ($f =~ /\.(?:[ch]|cuh?)$/) {
        # drop string and character literals first, so "/*" inside one does not open a comment
        $text =~ s{"(?:[^"\\\n]|\\.)*"|\x27(?:[^\x27\\\n]|\\.)*\x27}{ my $s = $&; $s =~ s/[^\n]//g; "\"\"$s" }ge;
        while ($text =~ m{/\*(.*?)\*/|//([^\n]*)}gs) {
            my $c = defined $1 ? $1 : $2;
            my $line = 1 + (() = substr($text, 0, $-[0]) =~ /\n/g);
            push @comments, [$line, $c];
        }
    } else {
        my $line = 0;
        for (split /\n/, $text) { $line++; push @comments, [$line, $1] if /(?:^|\s)#(?!include)(.*)$/; }
    }
    (my $dir = $f) =~ s{/[^/]*$}{};
    for my $c (@comments) {
        my ($line, $t) = @$c;
        $t =~ s{\b[a-z]+://\S+}{}g;   # URLs
        while ($t =~ m{(?<![\w./~\$<>-])((?:[\w.-]+/)*[\w-][\w.+-]*$ext)(?![\w/])}g) {
            my $p = $1;
            next if $p =~ m{^\.\./} || $p =~ /\.pb-c\./ || $p =~ m{^[A-Z]+\.\w+$};
            next if substr($t, 0, $-[0]) =~ m{(?:^|\s)/\S*$};   # part of an absolute path
            my @up = ($dir);
            push @up, $1 while $up[-1] =~ m{^(.*)/[^/]*$};
            my $ok = $p =~ m{/} ? (grep { -e $_ } ($p, "src/$p", "include/$p", map { "$_/$p" } @up)) : $base{$p};
            next if $ok;
            print "$f:$line: names \"$p\", which does not exist\n";
            $bad++;
        }
    }
}
if ($bad) { print "$bad file name(s) in comments do not exist\n"; exit 1 }
print "check_paths: every file named in a comment exists (", scalar(@files), " files read)\n";
'
