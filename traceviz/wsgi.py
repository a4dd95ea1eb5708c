import os

from django.core.wsgi import get_wsgi_application

from traceviz.production import refuse_embedded_secret_key

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")
application = get_wsgi_application()
refuse_embedded_secret_key()
