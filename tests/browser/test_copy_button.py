"""The copy button of a code block, clicked."""


def test_copy_button_copies_the_command_without_prompt(browser, base_url):
    """A real click on the copy button of an output block, read back from the clipboard."""
    ctx = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    try:
        page = ctx.new_page()
        page.goto(base_url + "01-ddp/")
        page.wait_for_selector('article button[data-md-type="copy"]', state="attached", timeout=10_000)
        block = page.locator("article .highlight", has_text="$ torchrun").first
        shown = block.locator("code").inner_text()
        command = next(l for l in shown.splitlines() if l.startswith("$ "))
        block.hover()
        block.locator('button[data-md-type="copy"]').click()
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied == command[2:], (copied, command)
    finally:
        ctx.close()
