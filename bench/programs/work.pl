# The Perl job of scripts/bench_programs.sh: hashes, regular expressions, split/join, sprintf and
# sort on data made from a fixed seed (perl's own srand/rand: the same on every allocator).
# Usage: perl work.pl N. Prints a digest of its results.
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);

my $n = shift // 100000;
srand(18);
my @letters = ('a' .. 'z');
my @words = map { join '', map { $letters[int rand 26] } 1 .. (3 + int rand 12) } 1 .. 30000;
my $d = Digest::MD5->new;

my @tokens = map { $words[int rand @words] } 1 .. $n;
my %count;
$count{$_}++ for @tokens;
my @top = (sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count)[0 .. 49];
$d->add("@top");

# records as hashes of arrays, sorted and grouped
my @recs = map { { name => $words[int rand @words], v => int rand 1e9,
                   tags => [map { $words[int rand @words] } 1 .. int rand 5] } } 1 .. $n / 4;
@recs = sort { $a->{name} cmp $b->{name} || $b->{v} <=> $a->{v} } @recs;
my %groups;
push @{ $groups{substr $_->{name}, 0, 2} }, $_ for @recs;
$d->add(join ',', map { "$_:" . scalar(@{ $groups{$_} }) . ":$groups{$_}[0]{v}" } sort keys %groups);

# text: join, regex substitution and matching, split
my $text = join ' ', @tokens;
(my $t2 = $text) =~ s/([aeiou])([^aeiou ]+)/\U$2\E$1/g;
my $m = () = $t2 =~ /\b[A-Z]{2,}[a-z]/g;
my @parts = split /e/, $text;
my @lines = map { sprintf "%s:%d:%s", $_, $count{$_}, scalar reverse $_ } sort keys %count;
$d->add(length($t2), " $m ", scalar(@parts), " ", length(join "\n", @lines));

# churn: short-lived hashes and strings
my @kept;
for my $i (0 .. $n / 8) {
  my %h = map { $_ => $i } @tokens[$i % 1000 .. $i % 1000 + 11];
  my $s = join '-', sort keys %h;
  push @kept, $s if $i % 97 == 0;
}
$d->add(join '', sort @kept);
print $d->hexdigest, "\n";
