# A package, so that this folder's conftest.py imports as browser.conftest: a second module named
# `conftest` would replace the root one that other tests import (from conftest import ...).
