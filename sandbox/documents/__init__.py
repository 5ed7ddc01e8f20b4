"""The emulator's documents: docx blocks, wiki nodes, sheets, drive files, their permissions and rate limits. In:
the docs Open API requests the Feishu emulator routes here. Out: documents as Feishu serves them."""
