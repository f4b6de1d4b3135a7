// Hold each table's key columns in place while it scrolls sideways: stick the first data-keys
// columns, each at the width of those before it, as long as they take under half the box.
(function () {
  "use strict";
  function place() {
    document.querySelectorAll("table.data").forEach(function (table) {
      var keys = parseInt(table.getAttribute("data-keys") || "0", 10);
      var box = table.parentElement;
      var limit = (box ? box.clientWidth : window.innerWidth) * 0.5;
      var x = 0, edge = null;
      table.querySelectorAll(".stick").forEach(function (c) {
        c.classList.remove("stick", "edge"); c.style.left = "";
      });
      for (var i = 1; i <= keys; i++) {
        var cells = table.querySelectorAll("tr > :nth-child(" + i + ")");
        if (!cells.length) { break; }
        var w = cells[0].getBoundingClientRect().width;
        if (i > 1 && x + w > limit) { break; }
        cells.forEach(function (c) { c.classList.add("stick"); c.style.left = x + "px"; });
        x += w;
        edge = cells;
      }
      if (edge) { edge.forEach(function (c) { c.classList.add("edge"); }); }
    });
  }
  window.addEventListener("load", place);
  window.addEventListener("resize", place);
})();
