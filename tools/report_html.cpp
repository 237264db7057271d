// `ein report --format html` (tools/report_summary.h): one file with inline CSS and SVG charts
// (roofline, memory ledger, FLOP share per module) and the rows nested by module in <details>;
// no scripts or external resources, so it opens anywhere and diffs as text.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tools/cli_format.h"
#include "tools/report_summary.h"

namespace ein::report {
namespace {

using cli::grouped;
using cli::percent;
using cli::seconds_text;
using cli::si;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

/// Log-log roofline: x intensity (FLOP/B), y attained FLOP/s (flops / roofline time).
std::string roofline_svg(const Report& r) {
  constexpr double W = 640, H = 400, L = 60, B = 40;
  const double xmin = 1e-2, xmax = 1e4, ymin = r.peak * 1e-6, ymax = r.peak * 2;
  const auto x = [&](double v) { return L + (std::log10(v) - std::log10(xmin)) / (std::log10(xmax) - std::log10(xmin)) * (W - L - 10); };
  const auto y = [&](double v) { return H - B - (std::log10(v) - std::log10(ymin)) / (std::log10(ymax) - std::log10(ymin)) * (H - B - 10); };
  std::string s = fmt::format(R"(<svg id="roofline" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">)", W, H, W, H);
  s += fmt::format(R"(<rect x="{}" y="10" width="{}" height="{}" fill="#fafafa" stroke="#999"/>)", L, W - L - 10, H - B - 10);
  const double ridge = r.peak / r.bandwidth;
  s += fmt::format(R"(<polyline fill="none" stroke="#c33" stroke-width="2" points="{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}"/>)",
                   x(xmin), y(std::max(ymin, xmin * r.bandwidth)), x(ridge), y(r.peak), x(xmax), y(r.peak));
  s += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" fill="#c33">{} peak {} FLOP/s, {} B/s</text>)", x(ridge) + 4, y(r.peak) - 4, r.math, si(r.peak), si(r.bandwidth));
  for (double v = xmin; v <= xmax * 1.01; v *= 10)
    s += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="10" text-anchor="middle">{:g}</text>)", x(v), H - B + 14, v);
  for (double v = ymin; v <= ymax; v *= 100)
    s += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="10" text-anchor="end">{}</text>)", L - 4, y(v) + 3, si(v));
  s += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">arithmetic intensity (FLOP/B), forward + backward</text>)", (W + L) / 2, H - 8);
  for (const Row& row : r.rows) {
    if (row.flops() == 0 || row.bytes() == 0 || row.seconds <= 0) continue;
    const double i = std::clamp(static_cast<double>(row.flops()) / static_cast<double>(row.bytes()), xmin, xmax);
    const double f = std::clamp(static_cast<double>(row.flops()) / row.seconds, ymin, ymax);
    s += fmt::format(R"(<circle class="point" cx="{:.1f}" cy="{:.1f}" r="3" fill="{}" fill-opacity="0.6"><title>{} {} ({})</title></circle>)",
                     x(i), y(f), row.memory_bound ? "#36c" : "#393", escape(row.scope), escape(row.text), escape(row.location));
  }
  return s + "</svg>";
}

/// The ledger as one stacked horizontal bar, with the device memory marked.
std::string memory_svg(const Report& r) {
  constexpr double W = 640, H = 120, L = 10;
  const double scale = (W - 2 * L) / std::max(r.total_bytes, r.device_memory);
  static constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948"};
  std::string s = fmt::format(R"(<svg id="memory" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">)", W, H, W, H);
  double at = L;
  int k = 0;
  std::string legend;
  for (const report::LedgerItem& item : r.ledger) {
    const double w = item.bytes * scale;
    s += fmt::format(R"(<rect class="segment" x="{:.1f}" y="10" width="{:.1f}" height="40" fill="{}"><title>{}: {}</title></rect>)", at, w, kColors[k % 6], escape(item.what), si(item.bytes, "B"));
    legend += fmt::format(R"(<rect x="{}" y="{}" width="10" height="10" fill="{}"/><text x="{}" y="{}" font-size="11">{}: {}</text>)", L + (k % 2) * 320, 62 + (k / 2) * 16, kColors[k % 6], L + 14 + (k % 2) * 320, 71 + (k / 2) * 16, escape(item.what), si(item.bytes, "B"));
    at += w;
    ++k;
  }
  const double dev = L + r.device_memory * scale;
  s += fmt::format(R"(<line x1="{:.1f}" y1="4" x2="{:.1f}" y2="56" stroke="#000" stroke-dasharray="4 2"/><text x="{:.1f}" y="8" font-size="10" text-anchor="end">{} {}</text>)", dev, dev, dev - 2, r.hw_name, si(r.device_memory, "B"));
  return s + legend + "</svg>";
}

/// FLOP share per module (scopes cut to two components: "blocks.0", "wte").
std::string share_svg(const Report& r) {
  std::vector<std::pair<std::string, double>> modules;
  std::map<std::string, size_t> at;
  for (const Row& row : r.rows) {
    std::string m = row.scope.empty() ? "(top level)" : row.scope;
    const size_t first = m.find('.');
    if (first != std::string::npos) {
      const size_t second = m.find('.', first + 1);
      if (second != std::string::npos) m = m.substr(0, second);
    }
    auto [it, fresh] = at.emplace(m, modules.size());
    if (fresh) modules.push_back({m, 0});
    modules[it->second].second += static_cast<double>(row.flops());
  }
  constexpr double W = 640, L = 160, BAR = 16;
  const double H = 20 + BAR * static_cast<double>(modules.size());
  double top = 0;
  for (const auto& m : modules) top = std::max(top, m.second);
  std::string s = fmt::format(R"(<svg id="share" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">)", W, H, W, H);
  const double step = static_cast<double>(r.step_flops());
  for (size_t i = 0; i < modules.size(); ++i) {
    const double yy = 10 + BAR * static_cast<double>(i);
    const double w = top > 0 ? modules[i].second / top * (W - L - 70) : 0;
    s += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="11" text-anchor="end">{}</text><rect class="bar" x="{}" y="{:.1f}" width="{:.1f}" height="{}" fill="#4e79a7"/><text x="{:.1f}" y="{:.1f}" font-size="10">{}</text>)",
                     L - 4, yy + 11, escape(modules[i].first), L, yy + 2, w, BAR - 4, L + w + 4, yy + 11, percent(modules[i].second, step));
  }
  return s + "</svg>";
}

}  // namespace

std::string render_html(const Report& r, const Summary& s) {
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ein report: " + escape(r.file) +
                  "</title><style>body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:"
                  "collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}td.n{text-align:right}"
                  "details{margin-left:1em}code{font-size:12px}</style></head><body>\n";
  h += fmt::format("<h1>ein report: {} (<code>{}</code>)</h1>\n<p>{} x {}</p>\n<h2>Conventions</h2><ul>", escape(r.file), escape(r.fn), grouped(r.gpus), escape(r.hw_name));
  for (const std::string& c : s.conventions) h += "<li>" + escape(c) + "</li>";
  h += "</ul>\n<h2>Model</h2>";
  h += fmt::format("<p>parameters: {} total, {} trainable, {} embedding, {} non-embedding. Tied: {}.</p>", grouped(static_cast<double>(r.params_total)),
                   grouped(static_cast<double>(r.params_trainable)), grouped(static_cast<double>(r.params_embedding)),
                   grouped(static_cast<double>(r.params_total - r.params_embedding)), r.tied.empty() ? std::string("none") : escape(fmt::format("{}", fmt::join(r.tied, "; "))));
  h += fmt::format("<h2>FLOPs ({} {}s per step)</h2><table><tr><th>convention</th><th>per {}</th><th>per step</th><th>note</th></tr>", grouped(static_cast<double>(r.tokens_per_step)), r.unit, r.unit);
  for (const Convention& c : s.flops)
    h += fmt::format("<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>", escape(c.name), si(c.per_token), si(c.per_step), escape(c.note));
  h += "</table>\n<h2>Roofline</h2>" + roofline_svg(r) + "\n<h2>Memory ledger</h2>" + memory_svg(r);
  h += fmt::format("<p>{} precision ({} B/param); optimizer {} (from {}). Activations: liveness peak {} ({} saved for backward + {} temporaries), at {}. Per device (data parallel): {} of {}: <b>{}</b>. Largest batch per device: {}.</p>",
                   r.precision, r.bytes_per_param, escape(r.optimizer), escape(r.optimizer_from), si(r.activation_peak, "B"),
                   si(r.activation_bytes, "B"), si(r.temporaries, "B"), escape(r.peak_at), si(s.per_device, "B"),
                   si(r.device_memory, "B"), fits_text(s.fits), grouped(s.max_batch));
  h += "<h2>What if</h2><table><tr><th>ZeRO stage</th><th>params</th><th>grads</th><th>optimizer</th><th>activations</th><th>total per device</th><th></th></tr>";
  for (const Summary::Zero& z : s.zero)
    h += fmt::format("<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>", z.stage,
                     si(z.params, "B"), si(z.grads, "B"), si(z.optimizer, "B"), si(z.activations, "B"), si(z.total, "B"), fits_text(z.fits));
  h += "</table><table><tr><th>micro-batch</th><th>accumulation steps</th><th>activations</th><th>total per device</th><th></th></tr>";
  for (const Summary::MicroBatch& m : s.micro)
    h += fmt::format("<tr><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>", grouped(m.micro),
                     grouped(m.accumulation), si(m.activations, "B"), si(m.total, "B"), fits_text(m.fits));
  h += "</table>";
  if (r.checkpoint_modules > 0)
    h += fmt::format("<p>Checkpointing each of the {} modules of {}: activations {} per device, total {}: <b>{}</b>, {:.3g}x the model FLOPs per step.</p>",
                     r.checkpoint_modules, escape(r.checkpoint_scope), si(s.checkpoint_activations, "B"), si(s.checkpoint_total, "B"),
                     fits_text(s.checkpoint_fits), s.checkpoint_flops_ratio);
  if (!s.budgets.empty()) {
    h += "<table><tr><th>activation budget</th><th>activations</th><th>total per device</th>"
         "<th></th><th>FLOPs per step</th></tr>";
    for (const Summary::Budget& b : s.budgets)
      h += fmt::format(
          "<tr><td class=n>{:g}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td>"
          "<td class=n>{:.3g}x</td></tr>",
          b.budget, si(b.activations, "B"), si(b.total, "B"), fits_text(b.fits), b.flops_ratio);
    h += "</table>";
  }
  h += "<table><tr><th>inference weights</th><th>bytes</th><th>smaller by</th><th></th><th>decode, "
       "batch 1, at most</th></tr>";
  for (const InferenceWeights& w : r.inference) {
    const double bytes = static_cast<double>(w.bytes);
    h += fmt::format(
        "<tr><td>{}</td><td class=n>{}</td><td class=n>{:.3g}x</td><td>{}</td><td class=n>{} "
        "tok/s</td></tr>",
        w.format, si(bytes, "B"), w.smaller_by, fits_text(w.fits), si(w.decode_bound));
  }
  h += "</table>";
  for (const std::optional<Summary::Prose>* prose : {&s.sampling, &s.held_out})
    if (*prose) {
      h += "\n<h2>" + escape((*prose)->title) + "</h2>";
      for (const std::string& line : (*prose)->lines) h += "<p>" + escape(line) + "</p>";
    }
  if (r.tokens)
    h += fmt::format("<h2>Time</h2><p>{} tokens: {:.4g} days on {} GPUs at MFU {} ({:.4g} by 6N·D), {:.4g} GPU-hours; {:.3g} tokens per parameter (Chinchilla about 20).</p>",
                     si(*r.tokens), s.days, grouped(r.gpus), r.mfu, s.days_6n, s.gpu_hours, s.tokens_per_param);
  h += "\n<h2>FLOP share per module</h2>" + share_svg(r);
  h += "\n<h2>Not counted</h2><ul>";
  if (r.uncounted.empty()) h += "<li>every node has a cost rule and is counted.</li>";
  for (const std::string& u : r.uncounted) h += "<li><b>WARNING</b>: " + escape(u) + "</li>";
  h += "</ul>\n<h2>Per expression</h2>\n";
  // Rows nest by module path: blocks > blocks.0 > blocks.0.attn, each a <details>.
  const double step = static_cast<double>(r.step_flops());
  const auto components = [](const std::string& scope) {
    std::vector<std::string> parts;
    for (size_t start = 0; !scope.empty() && start <= scope.size();) {
      const size_t end = std::min(scope.find('.', start), scope.size());
      parts.push_back(scope.substr(0, end));
      start = end + 1;
    }
    return parts;
  };
  std::vector<std::string> open;  // the <details> open now, outermost first
  bool table = false;
  std::string scope = "\x01";
  for (const Row& row : r.rows) {
    if (row.scope != scope) {
      if (table) h += "</table>\n";
      table = false;
      scope = row.scope;
      const std::vector<std::string> path = components(scope.empty() ? std::string("(top level)") : scope);
      size_t keep = 0;
      while (keep < open.size() && keep < path.size() && open[keep] == path[keep]) ++keep;
      for (size_t k = open.size(); k > keep; --k) h += "</details>\n";
      open.resize(keep);
      for (size_t k = keep; k < path.size(); ++k) {
        h += fmt::format("<details open><summary>{}</summary>\n", escape(path[k]));
        open.push_back(path[k]);
      }
      h += "<table><tr><th>location</th><th>expression</th><th>shape</th><th>fwd</th><th>bwd input</th><th>bwd weight</th><th>bytes</th><th>FLOP/B</th><th>bound</th><th>time</th><th>saved</th><th>share</th><th>contraction FLOPs</th></tr>";
      table = true;
    }
    h += fmt::format("<tr><td>{}</td><td><code>{}</code></td><td>{} = {}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{:.3g}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>",
                     escape(row.location), escape(row.text), escape(row.symbolic_shape), escape(row.shape), si(static_cast<double>(row.fwd_flops)), si(static_cast<double>(row.bwd_input_flops)),
                     si(static_cast<double>(row.bwd_weight_flops)), si(static_cast<double>(row.bytes()), "B"),
                     row.bytes() ? static_cast<double>(row.flops()) / static_cast<double>(row.bytes()) : 0.0, row.memory_bound ? "memory" : "compute",
                     seconds_text(row.seconds), si(static_cast<double>(row.saved_bytes), "B"), percent(static_cast<double>(row.flops()), step),
                     escape(row.formula));
  }
  if (table) h += "</table>\n";
  for (size_t k = 0; k < open.size(); ++k) h += "</details>\n";
  return h + "</body></html>\n";
}

}  // namespace ein::report
