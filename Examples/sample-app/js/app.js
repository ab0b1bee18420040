// Larder sample app: loads data/catalog.json (relative URL) and renders it.
// Renders:
//   document.body.dataset.version = catalog.version   (-> <body data-version="...">)
//   #status text: "Catalogue v<version> — <n> items"
//   one <li class="item" data-id="<id>" data-price="<0.00>"> per item, whose
//   text is exactly the item's name
// On failure: #status = "failed: <message>" and <body data-error="1">.
// Once rendered it calls larder.ready() (the page-health signal), when a container that watches
// page health put the script defining it in the page (`larder serve --page-health`, the WebKit
// glue); elsewhere `window.larder` is absent and nothing is called.
(function () {
  'use strict';

  function formatPrice(price) {
    return typeof price === 'number' ? price.toFixed(2) : '';
  }

  function render(catalog) {
    var items = Array.isArray(catalog.items) ? catalog.items : [];
    var list = document.getElementById('catalog');
    var status = document.getElementById('status');

    document.body.dataset.version = String(catalog.version);
    list.textContent = '';
    items.forEach(function (item) {
      var li = document.createElement('li');
      li.className = 'item';
      li.dataset.id = String(item.id);
      li.textContent = item.name;
      var price = formatPrice(item.price);
      if (price) {
        li.dataset.price = price;  // shown by CSS (::after), not part of the text
      }
      list.appendChild(li);
    });
    status.textContent = 'Catalogue v' + catalog.version + ' \u2014 ' + items.length + ' items';
  }

  function fail(err) {
    document.getElementById('status').textContent =
      'failed: ' + (err && err.message ? err.message : String(err));
    document.body.dataset.error = '1';
  }

  async function load() {
    try {
      var response = await fetch('data/catalog.json', { cache: 'no-store' });
      if (!response.ok) {
        throw new Error('HTTP ' + response.status + ' for data/catalog.json');
      }
      render(await response.json());
      if (window.larder && typeof window.larder.ready === 'function') {
        window.larder.ready();
      }
    } catch (err) {
      fail(err);
    }
  }

  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', load);
  } else {
    load();
  }
})();
