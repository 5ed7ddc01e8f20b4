"""`make eval`: what a real model makes of the requests the product sends. Scenario conversations run through the whole
stack (web, Redis, workers, the Feishu emulator, the Claude stand-in recording every request); each scenario's request
under test is checked for its structure (breakpoints, a byte-stable history, one tool list, described tools, no
duplicate blocks, no raw card placeholders, one time format) and answered by a model — offline the stand-in, with
ANTHROPIC_API_KEY the configured model — whose answer a rubric judges (which tool, which arguments, what must and
must not be said)."""
