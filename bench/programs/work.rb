# The Ruby job of scripts/bench_programs.sh (a text-heavy interpreter: what a web application's
# templating and serialisation does): builds records, renders them through string interpolation
# and gsub, parses them back with scan and split, serialises to JSON and back, sorts and groups.
# Usage: ruby work.rb N. Prints a digest of its results.
require "digest"
require "json"

n = (ARGV[0] || 100000).to_i
r = Random.new(18)
letters = ("a".."z").to_a
words = Array.new(30000) { Array.new(3 + r.rand(12)) { letters[r.rand(26)] }.join }
d = Digest::SHA256.new

recs = Array.new(n / 4) do |i|
  { "id" => i, "name" => words[r.rand(words.size)], "v" => r.rand(1_000_000_000),
    "tags" => Array.new(r.rand(5)) { words[r.rand(words.size)] } }
end
# render: an HTML-ish template per record
html = recs.map do |x|
  "<tr id=\"r#{x["id"]}\"><td>#{x["name"].capitalize}</td><td>#{x["v"]}</td>" \
    "<td>#{x["tags"].map { |t| "<b>#{t}</b>" }.join(", ")}</td></tr>"
end.join("\n")
html = html.gsub(/<b>([a-m]\w*)<\/b>/) { "<i>#{$1.upcase}</i>" }
d << html.bytesize.to_s << html.scan(/<i>/).size.to_s
# parse it back
names = html.scan(/<td>([A-Z][a-z]*)<\/td>/).flatten
d << names.tally.max_by(10) { |k, v| [v, k] }.inspect
# JSON round trip
js = JSON.generate(recs)
back = JSON.parse(js)
d << js.bytesize.to_s << back.size.to_s
# sort and group
groups = back.sort_by { |x| [x["name"], -x["v"]] }.group_by { |x| x["name"][0, 2] }
d << groups.keys.sort.map { |k| "#{k}#{groups[k].size}#{groups[k][0]["v"]}" }.join(",")
# a word count over split text
text = Array.new(n) { words[r.rand(words.size)] }.join(" ")
counts = Hash.new(0)
text.split(" ").each { |w| counts[w] += 1 }
d << counts.sort_by { |k, v| [-v, k] }.first(50).inspect
lines = counts.keys.sort.map { |w| format("%s:%d:%s", w, counts[w], w.reverse) }
d << lines.join("\n").upcase.tr("A", "@").bytesize.to_s
puts d.hexdigest
