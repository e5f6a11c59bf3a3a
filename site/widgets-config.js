// Loaded between require.js and embed-amd.js on every page with widgets (see build_site.py).
// @jupyter-widgets/html-manager loads its icon fonts relative to where requirejs says its two
// modules live; by default that is beside the page, where nothing is. Point both at the folder of
// fonts served with the site (html-manager/ beside this file).
(function () {
  var here = document.currentScript.src.split("?")[0].replace(/[^/]*$/, "");
  require.config({
    paths: {
      "@jupyter-widgets/html-manager": here + "html-manager/html-manager",
      "@jupyter-widgets/html-manager/dist": here + "html-manager",
    },
  });
})();
