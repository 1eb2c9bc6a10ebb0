#include "trex/or/families/text.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "trex/core/error.hpp"
#include "trex/core/strings.hpp"

namespace trex::orlib::text {

const std::vector<std::string>& companies() {
  static const std::vector<std::string> v = {"Acme Manufacturing",    "Blue Ridge Foods",
                                             "Crestline Logistics",   "Delta Components",
                                             "Evergreen Textiles",    "Falcon Aerospace",
                                             "Granite Works",         "Harbor Freight Lines",
                                             "Ironwood Furniture",    "Juniper Pharmaceuticals",
                                             "Keystone Steel",        "Lakeside Dairy",
                                             "Meridian Electronics",  "Northwind Traders",
                                             "Oakridge Paper",        "Pinnacle Plastics",
                                             "Quarry Stone Co.",      "Riverbend Brewing",
                                             "Summit Outdoor Gear",   "Trident Chemicals",
                                             "Unity Health Supplies", "Vanguard Motors",
                                             "Westfield Bakery",      "Xenon Lighting",
                                             "Yellowstone Lumber",    "Zenith Appliances",
                                             "Atlas Packaging",       "Beacon Solar",
                                             "Cobalt Robotics",       "Dunmore Glassworks",
                                             "Emerald Farms",         "Frontier Mining"};
  return v;
}

const std::vector<std::string>& products() {
  static const std::vector<std::string> v = {
      "chairs",   "tables",     "desks",     "bookshelves", "cabinets",    "lamps",
      "bicycles", "scooters",   "helmets",   "backpacks",   "jackets",     "boots",
      "laptops",  "tablets",    "monitors",  "keyboards",   "printers",    "routers",
      "sofas",    "mattresses", "wardrobes", "stools",      "benches",     "shelves",
      "kettles",  "toasters",   "blenders",  "heaters",     "fans",        "speakers",
      "tents",    "kayaks",     "skis",      "snowboards",  "skateboards", "drones"};
  return v;
}

const std::vector<std::string>& cities() {
  static const std::vector<std::string> v = {
      "Springfield", "Riverton",   "Lakewood", "Fairview", "Georgetown", "Clinton",
      "Franklin",    "Greenville", "Bristol",  "Salem",    "Madison",    "Arlington",
      "Ashland",     "Burlington", "Dayton",   "Dover",    "Hudson",     "Kingston",
      "Lexington",   "Milford",    "Newport",  "Oxford",   "Princeton",  "Richmond",
      "Shelby",      "Trenton",    "Vernon",   "Warren",   "Winchester", "Auburn",
      "Camden",      "Easton",     "Jackson",  "Marion",   "Norwood",    "Preston"};
  return v;
}

const std::vector<std::string>& people() {
  static const std::vector<std::string> v = {
      "Alice", "Bruno",  "Chen",   "Dana",  "Elif",  "Farid",  "Grace", "Hiro",  "Ines",
      "Jonas", "Kemal",  "Lena",   "Marco", "Nadia", "Omar",   "Priya", "Quinn", "Rosa",
      "Sven",  "Tara",   "Umar",   "Vera",  "Wei",   "Ximena", "Yusuf", "Zoe",   "Amir",
      "Bea",   "Carlos", "Dmitri", "Emma",  "Felix", "Gita",   "Hugo",  "Ivy",   "Jamal"};
  return v;
}

const std::vector<std::string>& foods() {
  static const std::vector<std::string> v = {
      "oats",    "rice",    "lentils", "chickpeas", "spinach", "broccoli", "carrots", "apples",
      "bananas", "yogurt",  "milk",    "cheese",    "eggs",    "chicken",  "salmon",  "tuna",
      "tofu",    "almonds", "peanuts", "quinoa",    "barley",  "potatoes", "beans",   "corn",
      "peas",    "oranges", "pasta",   "bread",     "turkey",  "beef",     "walnuts", "kale"};
  return v;
}

const std::vector<std::string>& nutrients() {
  static const std::vector<std::string> v = {
      "protein",     "fiber",     "calcium", "iron",       "vitamin_A",  "vitamin_C",
      "potassium",   "magnesium", "zinc",    "folate",     "calories",   "vitamin_D",
      "vitamin_B12", "omega3",    "sodium",  "phosphorus", "selenium",   "copper",
      "vitamin_E",   "vitamin_K", "niacin",  "riboflavin", "thiamin",    "iodine",
      "manganese",   "choline",   "biotin",  "chromium",   "molybdenum", "chloride"};
  return v;
}

const std::vector<std::string>& resources() {
  static const std::vector<std::string> v = {"assembly hours",
                                             "machining hours",
                                             "painting hours",
                                             "packaging hours",
                                             "inspection hours",
                                             "welding hours",
                                             "cutting hours",
                                             "sanding hours",
                                             "steel",
                                             "aluminium",
                                             "plastic resin",
                                             "timber",
                                             "glass",
                                             "copper wire",
                                             "fabric",
                                             "rubber",
                                             "labour hours",
                                             "oven hours",
                                             "press hours",
                                             "warehouse space",
                                             "cooling capacity",
                                             "testing hours",
                                             "drying hours",
                                             "polishing hours",
                                             "electricity",
                                             "water",
                                             "forklift hours",
                                             "crane hours",
                                             "quality checks",
                                             "design hours"};
  return v;
}

const std::vector<std::string>& projects() {
  static const std::vector<std::string> v = {
      "Solar Farm",      "Wind Park",      "Data Center",  "New Warehouse",  "Fleet Upgrade",
      "ERP Rollout",     "Robot Cell",     "Cold Storage", "Training Hub",   "Retail Kiosk",
      "Water Recycling", "Rooftop Garden", "EV Chargers",  "Packaging Line", "Mobile App",
      "Lab Expansion",   "Heat Pump",      "Drone Survey", "Smart Meters",   "Call Center",
      "Bridge Repair",   "School Wing",    "Clinic",       "Bike Lanes",     "Library Annex",
      "Sports Field",    "Fiber Network",  "Biogas Plant", "Flood Barrier",  "Bus Depot"};
  return v;
}

const std::vector<std::string>& assets() {
  static const std::vector<std::string> v = {"US Treasuries",    "Corporate Bonds",
                                             "Tech Stocks",      "Utilities",
                                             "Real Estate Fund", "Gold",
                                             "Emerging Markets", "Small Caps",
                                             "Energy Stocks",    "Healthcare Fund",
                                             "Municipal Bonds",  "Infrastructure",
                                             "Commodities",      "Euro Bonds",
                                             "Dividend Fund",    "Money Market",
                                             "Biotech Fund",     "Green Bonds",
                                             "Value Fund",       "Growth Fund",
                                             "REIT Index",       "Silver",
                                             "Asia Fund",        "Latin Fund",
                                             "Consumer Staples", "Banks",
                                             "Insurers",         "Telecoms",
                                             "Transport Fund",   "Index Fund"};
  return v;
}

const std::vector<std::string>& ingredients() {
  static const std::vector<std::string> v = {
      "wheat",          "barley",      "soybean meal", "fish meal",     "corn gluten",  "limestone",
      "molasses",       "bran",        "sorghum",      "canola meal",   "alfalfa",      "oat hulls",
      "sunflower meal", "peas",        "rice bran",    "bone meal",     "salt",         "whey",
      "crude oil A",    "crude oil B", "naphtha",      "kerosene",      "ethanol",      "butane",
      "scrap steel",    "pig iron",    "ferrosilicon", "manganese ore", "copper scrap", "nickel"};
  return v;
}

const std::vector<std::string>& tasks() {
  static const std::vector<std::string> v = {
      "Audit",     "Billing",  "Cleaning", "Delivery", "Editing",  "Filing",   "Grading",
      "Hiring",    "Imaging",  "Joining",  "Keying",   "Labeling", "Milling",  "Netting",
      "Ordering",  "Packing",  "Quoting",  "Routing",  "Sorting",  "Testing",  "Uploading",
      "Valuation", "Welding",  "Xray",     "Yield",    "Zoning",   "Assembly", "Baking",
      "Coating",   "Drilling", "Etching",  "Framing"};
  return v;
}

std::vector<std::string> pick_distinct(Rng& rng, const std::vector<std::string>& pool, size_t k) {
  require(k <= pool.size(), "text::pick_distinct: pool has only " + std::to_string(pool.size()) +
                                " names, " + std::to_string(k) + " requested");
  std::vector<std::string> out;
  for (size_t i : rng.sample(pool.size(), k)) out.push_back(pool[i]);
  return out;
}

std::string symbol(const std::string& display_name) {
  std::string out;
  for (char c : display_name) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '_')
      out += c;
    else if (c == ' ' || c == '-')
      out += '_';
  }
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "n" + out;
  return out;
}

std::vector<std::string> symbols(const std::vector<std::string>& display_names) {
  std::vector<std::string> out;
  out.reserve(display_names.size());
  for (const auto& n : display_names) out.push_back(symbol(n));
  return out;
}

std::string english_list(const std::vector<std::string>& items, const std::string& conj) {
  if (items.empty()) return "";
  if (items.size() == 1) return items[0];
  std::string out;
  for (size_t i = 0; i + 1 < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + " " + conj + " " + items.back();
}

std::string markdown_table(const std::vector<std::string>& header,
                           const std::vector<std::vector<std::string>>& rows) {
  std::string out = "| " + join(header, " | ") + " |\n|";
  for (size_t i = 0; i < header.size(); ++i) out += "---|";
  out += "\n";
  for (const auto& r : rows) out += "| " + join(r, " | ") + " |\n";
  return out;
}

std::string markdown_matrix(const std::vector<std::string>& labels,
                            const std::vector<std::vector<double>>& values) {
  std::vector<std::string> header = {""};
  for (const auto& label : labels) header.push_back(label);
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < labels.size(); ++i) {
    std::vector<std::string> row = {labels[i]};
    for (size_t j = 0; j < labels.size(); ++j) row.push_back(i == j ? "-" : num(values[i][j]));
    rows.push_back(row);
  }
  return markdown_table(header, rows);
}

std::string num(double v) {
  return format_number(v);
}

std::string money(double v) {
  bool cents = std::fabs(v - std::round(v)) > 1e-9;
  char buf[64];
  std::snprintf(buf, sizeof buf, cents ? "%.2f" : "%.0f", std::fabs(v));
  std::string digits(buf);
  size_t dot = digits.find('.');
  std::string whole = digits.substr(0, dot);
  std::string frac = dot == std::string::npos ? "" : digits.substr(dot);
  std::string grouped;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (i && (whole.size() - i) % 3 == 0) grouped += ',';
    grouped += whole[i];
  }
  return std::string(v < 0 ? "-" : "") + "$" + grouped + frac;
}

std::string article(const std::string& word) {
  if (word.empty()) return "a";
  char c = static_cast<char>(std::tolower(static_cast<unsigned char>(word[0])));
  return (c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u') ? "an" : "a";
}

std::string fill(std::string pattern,
                 std::initializer_list<std::pair<std::string_view, std::string_view>> values) {
  for (const auto& [placeholder, value] : values)
    pattern = replace_all(pattern, placeholder, value);
  return pattern;
}

std::string plural(const std::string& noun) {
  if (noun.size() > 1 && noun.back() == 'y' &&
      std::string_view("aeiou").find(noun[noun.size() - 2]) == std::string_view::npos)
    return noun.substr(0, noun.size() - 1) + "ies";
  if (noun.ends_with("s") || noun.ends_with("x") || noun.ends_with("sh") || noun.ends_with("ch"))
    return noun + "es";
  return noun + "s";
}

std::string capitalize(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}

}  // namespace trex::orlib::text
