// Starts Swagger UI on the element the page names (no inline script: the page's
// Content-Security-Policy allows scripts of its own origin only).
window.addEventListener("load", function () {
  var element = document.getElementById("swagger-ui");
  var config = JSON.parse(element.getAttribute("data-config") || "{}");
  config.url = element.getAttribute("data-spec-url");
  config.domNode = element;
  window.ui = SwaggerUIBundle(config);
});
